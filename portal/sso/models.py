"""Who an SSO login is (issuer + subject, never the e-mail) and the operator's mapping rules
(Keystone federation style: remote conditions on claims → local tenant + role)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from portal.tenants.models import Role, Tenant


class ExternalIdentity(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="external_identities")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    last_login_claims = models.JSONField(default=dict, blank=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"],
                                               name="external_identity_unique")]

    def __str__(self) -> str:
        return f"{self.subject} @ {self.issuer} → {self.user}"


class MappingRule(models.Model):
    class Match(models.TextChoices):
        ANY_ONE_OF = "any_one_of", "claim has any one of the values"
        NOT_ANY_OF = "not_any_of", "claim has none of the values"
        ENDS_WITH = "ends_with", "claim ends with one of the values"
        REGEX = "regex", "claim matches the regular expression"

    issuer = models.CharField(max_length=255, blank=True,
                              help_text="empty: any configured provider")
    claim = models.CharField(max_length=100, help_text="e.g. groups, email, roles")
    match = models.CharField(max_length=16, choices=Match.choices, default=Match.ANY_ONE_OF)
    values = models.TextField(help_text="one value per line (regex: one pattern)")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="sso_rules")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["tenant__slug", "claim"]

    def __str__(self) -> str:
        return f"{self.claim} {self.match} {self.values!r} → {self.role} of {self.tenant}"

    def value_list(self) -> list[str]:
        return [v.strip() for v in self.values.splitlines() if v.strip()]
