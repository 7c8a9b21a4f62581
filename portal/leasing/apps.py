from django.apps import AppConfig


class LeasingConfig(AppConfig):
    name = "portal.leasing"
    label = "leasing"
    verbose_name = "Leasing"

    def ready(self) -> None:
        # Convergence is an event (house rule 12): a node's report moves its leases at once.
        from portal.fleet import hooks
        from portal.inventory.hooks import storage_changed
        from portal.leasing import access_push
        from portal.leasing.lifecycle import reconcile, releasing
        from portal.tenants.hooks import access_changed

        hooks.on_node_converged(reconcile.node_converged)
        hooks.on_gpus_quarantined(releasing.gpus_quarantined)  # unclean GPU: move on
        from portal.leasing.lifecycle import healing

        hooks.on_parts_failed(healing.parts_failed)  # failed hardware leaves its leases
        # Access follows people (ADR 0102): who may log in changed -> push their nodes.
        access_changed.connect(access_push.push_tenants)
        storage_changed.connect(access_push.push_fabric)
        # A Celery worker reads the scheduler's caches as it starts (not on its first pass).
        from portal.leasing import warmup

        warmup.connect()
