from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "metrics"
    verbose_name = "Metrics"

    def ready(self) -> None:
        from runs import hooks
        from runs.models import Run

        from .receivers import count_relay_activity, count_run_end, count_turn

        hooks.turn_recorded.connect(count_turn, sender=Run, dispatch_uid="metrics.count_turn")
        hooks.status_changed.connect(count_run_end, sender=Run, dispatch_uid="metrics.count_run_end")
        hooks.relay_recorded.connect(count_relay_activity, sender=Run, dispatch_uid="metrics.count_relay_activity")
