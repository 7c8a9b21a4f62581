"""Agents (node or fabric role), their one-time bootstrap tokens and hashed credentials."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from portal.inventory.models import Node


class Role(models.TextChoices):
    NODE = "node", "Node"
    FABRIC = "fabric", "Fabric manager"


class Agent(models.Model):
    """One enrolled (or pre-registered) agent. ``agent_id`` is the opaque protocol id."""

    agent_id = models.CharField(max_length=32, unique=True, help_text="nd_ + 16 hex")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.NODE)
    node = models.OneToOneField(Node, on_delete=models.CASCADE, null=True, blank=True,
                                related_name="agent")
    hostname = models.CharField(max_length=253)
    machine_id = models.CharField(max_length=64, blank=True)
    agent_version = models.CharField(max_length=32, blank=True)
    enrolled_at = models.DateTimeField(null=True, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    last_seq = models.PositiveBigIntegerField(default=0)
    dropped_reports = models.PositiveBigIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["hostname"]
        constraints = [
            models.CheckConstraint(condition=Q(role="fabric") | Q(node__isnull=False),
                                   name="agent_node_role_has_node"),
        ]

    def __str__(self) -> str:
        return f"{self.role} agent {self.agent_id} ({self.hostname})"


class BootstrapToken(models.Model):
    """A one-time enrolment token; only its sha256 is stored. It enrols only a host whose
    name matches ``hostname_pattern`` (``fnmatch``, case-insensitive; empty: none — a
    token issued before bindings) in ``role``; ``allow_reenrol`` lets it replace an
    enrolled agent's identity without an operator's approval (a planned reinstall)."""

    token_hash = models.CharField(max_length=64, unique=True)
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.NODE)
    hostname_pattern = models.CharField(max_length=253, default="", blank=True)
    allow_reenrol = models.BooleanField(default=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                   null=True, blank=True, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_by = models.ForeignKey(Agent, on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="+")
    note = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return f"bootstrap token {self.pk} ({self.role})"


class AgentCredential(models.Model):
    """A per-agent bearer credential (``gpn_…``), stored as sha256 hex."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="credentials")
    credential_hash = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    valid_until = models.DateTimeField(null=True, blank=True,
                                       help_text="set on rotation: overlap end")
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"credential {self.pk} of {self.agent.agent_id}"


class AgentReport(models.Model):
    """The idempotency key of a report: ``(agent, seq)`` is stored once."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="reports")
    seq = models.PositiveBigIntegerField()
    received = models.DateTimeField(db_index=True)
    samples = models.PositiveSmallIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "seq"], name="agentreport_unique_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.agent.agent_id}#{self.seq}"
