import logging

from django.apps import AppConfig
from django.conf import settings

from health import readiness

logger = logging.getLogger(__name__)


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        from accounts.settings_sections import Section, register

        from .supervision import worker_check

        register(
            Section(
                anchor="spending",
                title="Model spending",
                template="runs/_settings_spending.html",
                context="runs.spend.settings_context",
            )
        )

        # Listed before the sandbox, where /readyz has always shown it.
        readiness.register("worker", worker_check, before="sandbox")
        if settings.SKILLRUNNER_SANDBOX == "off":
            # R-SB6: never silently unconfined; said at every start of every process.
            logger.warning("SKILLRUNNER_SANDBOX=off: engine agents run UNCONFINED as the service user")
