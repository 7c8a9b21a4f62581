from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "portal.monitoring"
    label = "monitoring"
    verbose_name = "Monitoring"
