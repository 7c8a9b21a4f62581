from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound as DrfNotFound
from rest_framework.exceptions import PermissionDenied as DrfPermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.core.errors import PermissionDenied
from portal.tenants import access, invitations, selectors, services
from portal.tenants.api import serializers as s
from portal.tenants.models import ApiKey, Invitation, Membership, Role, Tenant


def _roles(user: Any) -> dict[Any, str]:
    return {m.tenant_id: m.role for m in selectors.memberships_of(user=user)}


class TenantViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                    viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Tenants you belong to (staff: all). Staff create, suspend and resume tenants."""

    lookup_field = "slug"
    serializer_class = s.TenantSerializer

    def get_queryset(self) -> Any:
        return selectors.tenant_list(user=self.request.user)

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "roles": _roles(self.request.user)}

    def get_object(self) -> Tenant:
        return access.get_tenant(self.request.user, self.kwargs["slug"])

    @extend_schema(request=s.TenantCreateSerializer, responses={201: s.TenantSerializer})
    def create(self, request: Request) -> Response:
        if not access.is_staff(request.user):
            raise DrfPermissionDenied(_("Only platform staff create tenants."))
        body = s.TenantCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = services.tenant_create(actor=request.user, **body.validated_data)
        return Response(s.TenantSerializer(tenant, context=self.get_serializer_context()).data,
                        status=status.HTTP_201_CREATED)

    @extend_schema(request=s.TenantUpdateSerializer, responses=s.TenantSerializer)
    def partial_update(self, request: Request, slug: str) -> Response:
        tenant = self.get_object()
        body = s.TenantUpdateSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        tenant = services.tenant_update(actor=request.user, tenant=tenant, **body.validated_data)
        return Response(s.TenantSerializer(tenant, context=self.get_serializer_context()).data)

    def _set_status(self, request: Request, status_: str) -> Response:
        tenant = self.get_object()
        body = s.TenantStatusSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = services.tenant_set_status(actor=request.user, tenant=tenant, status=status_,
                                            reason=body.validated_data["reason"])
        return Response(s.TenantSerializer(tenant, context=self.get_serializer_context()).data)

    @extend_schema(request=s.TenantStatusSerializer, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def suspend(self, request: Request, slug: str) -> Response:
        return self._set_status(request, Tenant.Status.SUSPENDED)

    @extend_schema(request=s.TenantStatusSerializer, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, slug: str) -> Response:
        return self._set_status(request, Tenant.Status.ACTIVE)


class MembershipViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                        mixins.DestroyModelMixin, viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Members of a tenant. Viewers and up read; admins change (role, personal GPU
    limit `max_gpus`: null = none) and remove. New members come by invitation
    (`tenants/{slug}/invitations`); the last owner/admin cannot be removed or demoted."""

    serializer_class = s.MembershipSerializer
    queryset = Membership.objects.none()  # typing for the schema; get_queryset scopes

    def tenant(self) -> Tenant:
        return access.get_tenant(self.request.user, self.kwargs["tenant_slug"])

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):
            return Membership.objects.none()
        return selectors.membership_list(user=self.request.user, tenant=self.tenant())

    @extend_schema(request=s.MembershipUpdateSerializer, responses=s.MembershipSerializer)
    def partial_update(self, request: Request, tenant_slug: str, pk: str) -> Response:
        member = self.get_object()
        body = s.MembershipUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        with transaction.atomic():  # both changes or neither
            if "role" in data:
                member = services.membership_change_role(actor=request.user, member=member,
                                                         role=data["role"])
            if "max_gpus" in data:
                member = services.membership_set_limit(actor=request.user, membership=member,
                                                       max_gpus=data["max_gpus"])
        return Response(s.MembershipSerializer(member).data)

    def perform_destroy(self, instance: Membership) -> None:
        services.membership_remove(actor=self.request.user, member=instance)


class InvitationViewSet(mixins.ListModelMixin, mixins.DestroyModelMixin,
                        viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Open invitations of a tenant (owners and admins). POST invites an e-mail address
    (202, the same answer for any address); DELETE withdraws. The invitee accepts with the
    e-mailed token (`invitations/accept`)."""

    serializer_class = s.InvitationSerializer
    queryset = Invitation.objects.none()  # typing for the schema; get_queryset scopes

    def tenant(self) -> Tenant:
        return access.get_tenant(self.request.user, self.kwargs["tenant_slug"])

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):
            return Invitation.objects.none()
        return selectors.invitation_list(user=self.request.user, tenant=self.tenant())

    @extend_schema(request=s.InvitationCreateSerializer, responses={202: s.InvitationSerializer})
    def create(self, request: Request, tenant_slug: str) -> Response:
        body = s.InvitationCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        issued = invitations.invitation_create(
            actor=request.user, tenant=self.tenant(), email=body.validated_data["email"],
            role=body.validated_data["role"], base_url=request.build_absolute_uri("/"))
        return Response(s.InvitationSerializer(issued.invitation).data,
                        status=status.HTTP_202_ACCEPTED)

    def perform_destroy(self, instance: Invitation) -> None:
        invitations.invitation_revoke(actor=self.request.user, invitation=instance)


class InvitationAcceptView(APIView):
    """Accept an invitation addressed to your e-mail. The tenant you act for stays as it
    was; switch with `POST /me` when you want to work in the new one."""

    throttle_scope = "invitation_accept"

    @extend_schema(request=s.InvitationAcceptSerializer, responses=s.AcceptedSerializer)
    def post(self, request: Request) -> Response:
        body = s.InvitationAcceptSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        member = invitations.accept_keeping_active_tenant(request, body.validated_data["token"])
        active = access.active_tenant(request)
        return Response({"tenant": member.tenant.slug, "role": member.role,
                         "active_tenant": active.slug if active else None})


class ApiKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin,
                    viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Your API keys. The secret is returned once, at creation. DELETE revokes."""

    serializer_class = s.ApiKeySerializer
    queryset = ApiKey.objects.none()  # typing for the schema; get_queryset scopes

    def get_queryset(self) -> Any:
        return selectors.api_key_list(user=self.request.user)

    @extend_schema(request=s.ApiKeyCreateSerializer, responses={201: s.ApiKeyIssuedSerializer})
    def create(self, request: Request) -> Response:
        body = s.ApiKeyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        tenant = None
        if data["tenant"]:
            try:
                tenant = access.get_tenant(request.user, data["tenant"])
            except Exception as exc:
                raise DrfNotFound(_("No such tenant.")) from exc
        elif not access.is_staff(request.user):
            tenant = access.active_tenant(request)
        issued = services.api_key_create(actor=request.user, name=data["name"], tenant=tenant,
                                         expires_at=data["expires_at"])
        out = s.ApiKeyIssuedSerializer(issued.key).data
        out["secret"] = issued.secret
        return Response(out, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: ApiKey) -> None:
        services.api_key_revoke(actor=self.request.user, key=instance)


class MeView(APIView):
    """Who you are, your tenants and roles, and the tenant you act for."""

    @extend_schema(responses=s.MeSerializer)
    def get(self, request: Request) -> Response:
        return Response(self._me(request))

    @extend_schema(request=s.ActiveTenantSerializer, responses=s.MeSerializer)
    def post(self, request: Request) -> Response:
        """Switch the session's active tenant."""
        body = s.ActiveTenantSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = access.get_tenant(request.user, body.validated_data["tenant"])
        request.session[access.SESSION_KEY] = tenant.slug
        return Response(self._me(request))

    def _me(self, request: Request) -> dict[str, Any]:
        user = request.user
        try:
            active = access.active_tenant(request)
        except PermissionDenied:
            active = None
        return {
            "username": user.get_username(),
            "email": getattr(user, "email", ""),
            "is_staff": access.is_staff(user),
            "active_tenant": active.slug if active else None,
            "memberships": [{"tenant": m.tenant.slug, "name": m.tenant.name, "role": m.role}
                            for m in selectors.memberships_of(user=user)],
        }


__all__ = ["ApiKeyViewSet", "InvitationAcceptView", "InvitationViewSet", "MeView",
           "MembershipViewSet", "Role", "TenantViewSet"]
