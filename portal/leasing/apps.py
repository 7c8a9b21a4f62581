from django.apps import AppConfig


class LeasingConfig(AppConfig):
    name = "portal.leasing"
    label = "leasing"
    verbose_name = "Leasing"

    def ready(self) -> None:
        # Convergence is an event (house rule 12): a node's report moves its leases at once.
        from portal.fleet import hooks
        from portal.leasing import orchestration

        hooks.on_node_converged(orchestration.node_converged)
