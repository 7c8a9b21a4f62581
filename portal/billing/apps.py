from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "portal.billing"
    label = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        # Quotes show billing's price; leasing never imports billing (ADR 0009).
        from portal.billing import pricing
        from portal.leasing import quoting

        quoting.price_with(pricing)
