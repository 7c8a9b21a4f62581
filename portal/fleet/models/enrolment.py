"""An enrolment held for an operator: it would replace an enrolled agent's identity."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from portal.fleet.models.agents import Agent, BootstrapToken, Role


class EnrolmentRequest(models.Model):
    """A valid, in-binding enrolment for a host whose agent is already enrolled. The host
    gets no credential until a staff member approves (console → Enrolments); the agent
    retries with the same bootstrap token and is answered 409 ``pending_approval``."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        DENIED = "denied", "Denied"
        COMPLETED = "completed", "Completed"

    token = models.OneToOneField(BootstrapToken, on_delete=models.CASCADE,
                                 related_name="enrolment_request")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE,
                              related_name="enrolment_requests",
                              help_text="the enrolled identity the host would take over")
    role = models.CharField(max_length=8, choices=Role.choices)
    hostname = models.CharField(max_length=253)
    machine_id = models.CharField(max_length=64, blank=True)
    agent_version = models.CharField(max_length=32, blank=True)
    inventory = models.JSONField(default=dict, blank=True)
    remote_addr = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING,
                             db_index=True)
    created = models.DateTimeField(auto_now_add=True)
    last_attempt = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=1)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                   null=True, blank=True, related_name="+")
    reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"enrolment of {self.hostname} ({self.state})"
