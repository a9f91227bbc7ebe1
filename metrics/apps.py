from django.apps import AppConfig
from django.db.models.signals import post_save


class MetricsConfig(AppConfig):
    name = "metrics"
    verbose_name = "Metrics"

    def ready(self) -> None:
        from runs.models import TurnUsage

        from .receivers import count_turn

        post_save.connect(count_turn, sender=TurnUsage, dispatch_uid="metrics.count_turn")
