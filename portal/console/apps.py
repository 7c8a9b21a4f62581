from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "portal.console"
    label = "console"
    verbose_name = "Operators' console"
