from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from portal.core.api.serializers import StrictSerializer
from portal.tenants.models import ApiKey, Invitation, Membership, Role, Tenant
from portal.tenants.services import MAX_MEMBER_GPUS


class TenantSerializer(serializers.ModelSerializer[Tenant]):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Tenant
        fields = ["id", "slug", "name", "status", "contact_name", "contact_email", "currency",
                  "created", "role"]
        read_only_fields = ["id", "slug", "status", "currency", "created", "role"]

    def get_role(self, obj: Tenant) -> str | None:
        roles: dict[Any, str] = self.context.get("roles", {})
        return roles.get(obj.pk)


class TenantCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=120)
    slug = serializers.SlugField(max_length=63, required=False, default="")
    contact_name = serializers.CharField(max_length=120, required=False, default="",
                                         allow_blank=True)
    contact_email = serializers.EmailField(required=False, default="", allow_blank=True)
    currency = serializers.RegexField(r"^[A-Za-z]{3}$", required=False, default="USD")


class TenantUpdateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=120, required=False)
    contact_name = serializers.CharField(max_length=120, required=False, allow_blank=True)
    contact_email = serializers.EmailField(required=False, allow_blank=True)


class TenantStatusSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)


class MembershipSerializer(serializers.ModelSerializer[Membership]):
    username = serializers.CharField(source="user.username", read_only=True)
    email = serializers.CharField(source="user.email", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "username", "email", "role", "max_gpus", "created"]
        read_only_fields = ["id", "username", "email", "max_gpus", "created"]


class InvitationCreateSerializer(StrictSerializer):
    email = serializers.EmailField()
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)


class InvitationSerializer(serializers.ModelSerializer[Invitation]):
    """The same answer whether or not an account with this address exists."""

    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    inviter = serializers.CharField(source="inviter.username", read_only=True, default=None)

    class Meta:
        model = Invitation
        fields = ["id", "tenant", "email", "role", "inviter", "created", "expires_at"]
        read_only_fields = fields


class InvitationAcceptSerializer(StrictSerializer):
    token = serializers.CharField(max_length=200)


class AcceptedSerializer(serializers.Serializer[None]):
    tenant = serializers.CharField()
    role = serializers.CharField()
    active_tenant = serializers.CharField(allow_null=True)


class MembershipUpdateSerializer(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices, required=False)
    max_gpus = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_MEMBER_GPUS,
        help_text="Personal GPU limit inside the tenant; null clears it (no limit).")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError(
                {"role": [_("Give a role, a GPU limit (max_gpus) or both.")]})
        return attrs


class ApiKeySerializer(serializers.ModelSerializer[ApiKey]):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    active = serializers.SerializerMethodField()

    class Meta:
        model = ApiKey
        fields = ["id", "name", "prefix", "tenant", "created", "expires_at", "revoked_at",
                  "last_used_at", "active"]
        read_only_fields = fields

    def get_active(self, obj: ApiKey) -> bool:
        from django.utils import timezone

        return obj.revoked_at is None and (obj.expires_at is None
                                           or obj.expires_at > timezone.now())


class ApiKeyCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100)
    tenant = serializers.SlugField(max_length=63, required=False, allow_null=True, default=None)
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class ApiKeyIssuedSerializer(ApiKeySerializer):
    secret = serializers.CharField(read_only=True, help_text="Shown once; store it now.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "secret"]
        read_only_fields = fields


class MeSerializer(serializers.Serializer[None]):
    username = serializers.CharField()
    email = serializers.CharField()
    is_staff = serializers.BooleanField()
    active_tenant = serializers.CharField(allow_null=True)
    memberships = serializers.ListField(child=serializers.DictField())


class ActiveTenantSerializer(StrictSerializer):
    tenant = serializers.SlugField(max_length=63)
