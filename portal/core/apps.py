from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "portal.core"
    label = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from portal.core import signals  # noqa: F401  (login/logout audit receivers)
