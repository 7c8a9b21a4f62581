from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "portal.fleet"
    label = "fleet"
    verbose_name = "Fleet: agents, desired state, partitions"
