from django.apps import AppConfig


class LeasingConfig(AppConfig):
    name = "portal.leasing"
    label = "leasing"
    verbose_name = "Leasing"
