from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "portal.webhooks"
    label = "webhooks"
    verbose_name = "Webhooks"

    def ready(self) -> None:
        # Outbound channels hear the apps' news after commit (portal/core/hooks.py).
        from portal.billing.hooks import budget_alert
        from portal.leasing.hooks import lease_event
        from portal.webhooks import events

        lease_event.connect(events.lease_news)
        budget_alert.connect(events.budget_news)
