from __future__ import annotations

import json
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.core.api.serializers import StrictSerializer
from portal.webhooks.models import Attempt, Endpoint, Message


class EndpointSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    events = serializers.ListField(child=serializers.CharField())
    previous_secret_expires_at = serializers.DateTimeField(source="previous_expires_at",
                                                           read_only=True, allow_null=True)

    class Meta:
        model = Endpoint
        fields = ["id", "url", "description", "events", "enabled", "disabled_reason",
                  "disabled_at", "previous_secret_expires_at", "created", "updated"]
        read_only_fields = fields


class EndpointIssuedSerializer(EndpointSerializer):
    secret = serializers.CharField(read_only=True,
                                   help_text="the signing secret (whsec_…), shown once")

    class Meta(EndpointSerializer.Meta):
        fields = [*EndpointSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class EndpointCreateSerializer(StrictSerializer):
    url = serializers.URLField(max_length=500)
    events = serializers.ListField(child=serializers.CharField(max_length=64), min_length=1,
                                   help_text='event types, or ["*"] for all')
    description = serializers.CharField(max_length=200, required=False, default="",
                                        allow_blank=True)


class EndpointUpdateSerializer(StrictSerializer):
    url = serializers.URLField(max_length=500, required=False)
    events = serializers.ListField(child=serializers.CharField(max_length=64), min_length=1,
                                   required=False)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False)


class AttemptSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Attempt
        fields = ["at", "response_status", "response_excerpt", "error", "duration_ms"]
        read_only_fields = fields


class MessageSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    webhook_id = serializers.CharField(source="msg_id", read_only=True)
    payload = serializers.SerializerMethodField()
    attempts = AttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Message
        fields = ["id", "webhook_id", "event_type", "status", "attempt_count",
                  "last_status", "next_attempt_at", "created", "payload", "attempts"]
        read_only_fields = fields

    @extend_schema_field(serializers.DictField())
    def get_payload(self, obj: Message) -> Any:
        return json.loads(obj.body)
