from django.apps import AppConfig

from health import readiness

from .config import SANDBOX_OFF, sandbox_check


class EngineHostConfig(AppConfig):
    name = "enginehost"
    verbose_name = "Engines on this host"

    def ready(self) -> None:
        # Switched off on purpose the sandbox is no reason to refuse traffic; /readyz says so (R-SB6).
        readiness.register("sandbox", sandbox_check, also_ready={SANDBOX_OFF})
