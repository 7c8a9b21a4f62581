"""Endpoints a tenant registered, the messages owed to them and every try to deliver one."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from portal.tenants.models import Tenant

ALL_EVENTS = "*"


class Endpoint(models.Model):
    """A receiver URL of a tenant, the events it wants and the secret(s) it is signed with.

    During a rotation overlap ``previous_secret`` signs too (until ``previous_expires_at``).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=500)
    description = models.CharField(max_length=200, blank=True)
    events = models.JSONField(default=list, help_text='event types, or ["*"] for all')
    secret = models.CharField(max_length=100)
    previous_secret = models.CharField(max_length=100, blank=True)
    previous_expires_at = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    disabled_reason = models.CharField(max_length=300, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                   null=True, blank=True, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created"]
        indexes = [models.Index(fields=["tenant", "enabled"])]

    def __str__(self) -> str:
        return f"{self.tenant} → {self.url}"

    def wants(self, event: str) -> bool:
        return ALL_EVENTS in self.events or event in self.events


class Message(models.Model):
    """One event owed to one endpoint: the exact body, signed afresh at every try under the
    same ``webhook-id`` (so receivers deduplicate)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    msg_id = models.CharField(max_length=40, unique=True)
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="messages")
    event_type = models.CharField(max_length=64)
    body = models.TextField(help_text="the JSON payload, byte for byte as sent")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    step = models.PositiveSmallIntegerField(default=0, help_text="index in the retry schedule")
    attempt_count = models.PositiveIntegerField(default=0)
    manual = models.BooleanField(default=False, help_text="a 'send again': one try, no retries")
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["status", "next_attempt_at"],
                                condition=Q(status="pending"), name="webhook_msg_due")]

    def __str__(self) -> str:
        return f"{self.msg_id} {self.event_type} {self.status}"


class Attempt(models.Model):
    """One try: when, the response code (None: no response), a short excerpt, the error."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="attempts")
    at = models.DateTimeField()
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_excerpt = models.CharField(max_length=500, blank=True)
    error = models.CharField(max_length=300, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.message_id} {self.at:%H:%M:%S} {self.response_status or self.error}"
