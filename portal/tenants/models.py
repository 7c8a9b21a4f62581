from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


class Tenant(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        SUSPENDED = "suspended", "Suspended"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=63, unique=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    contact_email = models.EmailField(blank=True)
    contact_name = models.CharField(max_length=120, blank=True)
    currency = models.CharField(max_length=3, default="USD")
    allow_password_login = models.BooleanField(
        default=True, db_default=True,
        help_text="off: members sign in through SSO only (staff still can)")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_active(self) -> bool:
        return self.status == self.Status.ACTIVE


class Role(models.TextChoices):
    """Tenant roles, strongest first. Platform staff (``is_staff``) are separate."""

    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


ROLE_RANK = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2, Role.OWNER: 3}


class Membership(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    max_gpus = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="personal GPU limit inside the tenant (own non-terminal leases); "
                  "empty = none")
    source = models.CharField(
        max_length=255, default="local", db_default="local",
        help_text="local (invitation, admin) or oidc:<issuer> (granted by SSO mapping rules)")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_user"),
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"

    def has_role(self, at_least: str) -> bool:
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(at_least)]


class ApiKey(models.Model):
    """A per-user API key bound to one tenant. Only a SHA-256 of the secret is stored."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="api_keys")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys",
                               null=True, blank=True)
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    created = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.CheckConstraint(condition=~Q(prefix=""), name="apikey_prefix_not_empty"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class SshPublicKey(models.Model):
    """A user's OpenSSH public key; granted to the lease accounts of their tenants' leases."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="ssh_keys")
    name = models.CharField(max_length=100)
    key_type = models.CharField(max_length=40)
    public_key = models.TextField()
    fingerprint = models.CharField(max_length=64, help_text="SHA256:…")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["user", "name"]
        constraints = [
            models.UniqueConstraint(fields=["user", "fingerprint"], name="sshkey_unique_per_user"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.fingerprint}"


class UserPreference(models.Model):
    """Per-user settings that outlive a browser session: the language of the e-mails the
    portal sends them (set when they pick a language in the portal)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="preference")
    language = models.CharField(max_length=16, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.user} ({self.language or 'default'})"


class Invitation(models.Model):
    """An offer of a role in a tenant, sent to an e-mail address and accepted by whoever
    signs in with that address and holds the token. Only a SHA-256 of the token is kept.
    Open = neither accepted nor revoked (one open invitation per tenant and address)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField(help_text="stored lower-case")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    token_hash = models.CharField(max_length=64, unique=True)
    inviter = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                null=True, blank=True, related_name="invitations_sent")
    created = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                    null=True, blank=True, related_name="invitations_accepted")
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "email"], name="invitation_one_open_per_address",
                condition=Q(accepted_at__isnull=True, revoked_at__isnull=True)),
            models.CheckConstraint(condition=Q(email=models.functions.Lower("email")),
                                   name="invitation_email_lower"),
        ]

    def __str__(self) -> str:
        return f"{self.email} → {self.tenant} ({self.role})"
