from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class AuditLog(models.Model):
    """Append-only record of every change and every sign-in: who, what, when, from where."""

    created = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="+")
    actor_repr = models.CharField(max_length=200, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64, blank=True, db_index=True)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    tenant = models.ForeignKey("tenants.Tenant", null=True, blank=True,
                               on_delete=models.SET_NULL, related_name="+")
    changes = models.JSONField(default=dict, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=300, blank=True)
    via = models.CharField(max_length=16, default="system")

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"])]

    def __str__(self) -> str:
        return f"{self.created:%Y-%m-%d %H:%M:%S} {self.actor_repr} {self.action}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("audit log entries are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise ValueError("audit log entries are append-only")


class MetricBucket(models.Model):
    """One bucket of a histogram fed by code that runs in any process on any host (the
    scheduling pass runs in Celery workers, ``/metrics`` is served by web processes): each
    observation adds one to the row of the smallest bound it fits under, in one upsert
    (``portal.core.histograms``). ``le`` is the bound as Prometheus writes it (``+Inf``
    for the last); ``total`` the sum of the values observed in this bucket. ADR 0230."""

    name = models.CharField(max_length=64)
    le = models.CharField(max_length=16)
    count = models.PositiveBigIntegerField(default=0)
    total = models.FloatField(default=0.0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "le"],
                                               name="metric_bucket_unique")]

    def __str__(self) -> str:
        return f"{self.name}{{le={self.le}}} {self.count}"
