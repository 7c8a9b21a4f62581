from __future__ import annotations

from django.contrib import admin

from portal.webhooks.models import Attempt, Endpoint, Message


@admin.register(Endpoint)
class EndpointAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("url", "tenant", "enabled", "disabled_reason", "created")
    list_filter = ("enabled",)
    search_fields = ("url", "tenant__slug")
    exclude = ("secret", "previous_secret")  # never shown, not even to staff
    readonly_fields = ("tenant", "created_by", "previous_expires_at", "disabled_at")


class AttemptInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Attempt
    extra = 0
    can_delete = False
    readonly_fields = ("at", "response_status", "response_excerpt", "error", "duration_ms")


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("msg_id", "event_type", "status", "attempt_count", "last_status", "created")
    list_filter = ("status", "event_type")
    search_fields = ("msg_id",)
    readonly_fields = ("msg_id", "endpoint", "event_type", "body", "step", "attempt_count",
                       "manual", "last_status", "created")
    inlines = [AttemptInline]
