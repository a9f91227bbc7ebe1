from django.apps import AppConfig


class UpstreamConfig(AppConfig):
    name = "upstream"
    verbose_name = "Upstream client compatibility"
