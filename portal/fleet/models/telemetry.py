"""Latest telemetry per GPU and per IB port, and a downsampled history."""

from __future__ import annotations

from django.db import models

from portal.inventory.models import Node


class GpuTelemetry(models.Model):
    """The latest sample of one GPU (one row per node and NVML index, upserted)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_telemetry")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, blank=True)
    ts = models.DateTimeField()
    healthy = models.BooleanField(default=True)
    lost = models.BooleanField(default=False)
    last_xid = models.IntegerField(null=True, blank=True)
    data = models.JSONField(default=dict)

    class Meta:
        verbose_name = "GPU telemetry"
        verbose_name_plural = "GPU telemetry"
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gputelemetry_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id}/gpu{self.index} @ {self.ts}"


class PortTelemetry(models.Model):
    """The latest sample of one HCA port."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="port_telemetry")
    device = models.CharField(max_length=32)
    port = models.PositiveSmallIntegerField()
    port_guid = models.CharField(max_length=18, blank=True)
    ts = models.DateTimeField()
    state_id = models.PositiveSmallIntegerField(null=True, blank=True)
    phys_state_id = models.PositiveSmallIntegerField(null=True, blank=True)
    data = models.JSONField(default=dict)

    class Meta:
        verbose_name = "IB port telemetry"
        verbose_name_plural = "IB port telemetry"
        constraints = [
            models.UniqueConstraint(fields=["node", "device", "port"],
                                    name="porttelemetry_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id}/{self.device}:{self.port} @ {self.ts}"


class TelemetrySample(models.Model):
    """Downsampled history: at most one row per GPU (or port) per minute."""

    class Kind(models.TextChoices):
        GPU = "gpu", "GPU"
        PORT = "port", "IB port"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=4, choices=Kind.choices)
    key = models.CharField(max_length=40, help_text="GPU index or device:port")
    minute = models.DateTimeField(db_index=True)
    values = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "kind", "key", "minute"],
                                    name="telemetrysample_unique_minute"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} {self.kind} {self.key} {self.minute}"
