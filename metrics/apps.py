from django.apps import AppConfig
from django.db.models.signals import post_save


class MetricsConfig(AppConfig):
    name = "metrics"
    verbose_name = "Metrics"

    def ready(self) -> None:
        from runs import hooks
        from runs.models import Run, TurnUsage

        from .receivers import count_relay_activity, count_run_end, count_turn

        post_save.connect(count_turn, sender=TurnUsage, dispatch_uid="metrics.count_turn")
        hooks.status_changed.connect(count_run_end, sender=Run, dispatch_uid="metrics.count_run_end")
        hooks.relay_recorded.connect(count_relay_activity, sender=Run, dispatch_uid="metrics.count_relay_activity")
