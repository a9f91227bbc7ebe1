import logging

from django.apps import AppConfig
from django.conf import settings

logger = logging.getLogger(__name__)


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        if settings.SKILLRUNNER_SANDBOX == "off":
            # R-SB6: never silently unconfined; said at every start of every process.
            logger.warning("SKILLRUNNER_SANDBOX=off: engine agents run UNCONFINED as the service user")
