from django.apps import AppConfig


class EngineHostConfig(AppConfig):
    name = "enginehost"
    verbose_name = "Engines on this host"
