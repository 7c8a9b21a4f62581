"""The one gate to tenant data (architecture house rule 2).

Every API view, page, export and WebSocket consumer resolves the caller's tenant here and
scopes its querysets with :func:`scope`. Not being a member of a tenant looks exactly like
the tenant not existing (404); being a member with too weak a role is a 403.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Model, QuerySet
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from portal.core.errors import NotFound, PermissionDenied
from portal.tenants.models import Membership, Role, Tenant

M = TypeVar("M", bound=Model)
AnyUser = AbstractBaseUser | AnonymousUser

# Role names for messages, in the active language (the same msgids as portal/web/labels.py).
ROLE_LABELS = {Role.OWNER: gettext_lazy("Owner"), Role.ADMIN: gettext_lazy("Admin"),
               Role.MEMBER: gettext_lazy("Member"), Role.VIEWER: gettext_lazy("Viewer")}

TENANT_HEADER = "HTTP_X_GPUPOOL_TENANT"
SESSION_KEY = "active_tenant"


def is_staff(user: AnyUser | None) -> bool:
    return bool(user is not None and user.is_authenticated and getattr(user, "is_staff", False))


def tenants_for(user: AnyUser | None) -> QuerySet[Tenant]:
    """Tenants the user may see: all for staff, their memberships otherwise."""
    if user is None or not user.is_authenticated:
        return Tenant.objects.none()
    if is_staff(user):
        return Tenant.objects.all()
    return Tenant.objects.filter(memberships__user=user).distinct()


def membership(user: AnyUser | None, tenant: Tenant) -> Membership | None:
    if user is None or not user.is_authenticated:
        return None
    return Membership.objects.filter(user=user, tenant=tenant).first()


def get_tenant(user: AnyUser | None, slug: str, *, role: str = Role.VIEWER) -> Tenant:
    """The tenant ``slug`` if ``user`` holds at least ``role`` in it (staff: always)."""
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise NotFound(_("No such tenant."))
    require_role(user, tenant, role)
    return tenant


def require_role(user: AnyUser | None, tenant: Tenant, role: str) -> None:
    """404 for strangers, 403 for members whose role is too weak. Staff pass."""
    if is_staff(user):
        return
    member = membership(user, tenant)
    if member is None:
        raise NotFound(_("No such tenant."))
    if not member.has_role(role):
        raise PermissionDenied(_("This needs the %(role)s role or higher.")
                               % {"role": str(ROLE_LABELS[Role(role)]).lower()})


def role_in(user: AnyUser | None, tenant: Tenant) -> str | None:
    member = membership(user, tenant)
    return member.role if member else None


def active_tenant(request: Any) -> Tenant | None:
    """The tenant a request acts for.

    Order: the API key's tenant; the ``X-Gpupool-Tenant`` header; the session's switcher
    choice; the user's only (or first) tenant. A tenant the user cannot see is ignored for
    the session and refused (404) for an explicit header.
    """
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    auth = getattr(request, "auth", None)
    key_tenant = getattr(auth, "tenant", None)
    if isinstance(key_tenant, Tenant):
        return key_tenant
    header = request.META.get(TENANT_HEADER)
    if header:
        return get_tenant(user, header)
    session = getattr(request, "session", None)
    visible = tenants_for(user)
    slug = session.get(SESSION_KEY) if session is not None else None
    if slug:
        chosen = visible.filter(slug=slug).first()
        if chosen is not None:
            return chosen
    if is_staff(user):
        return None
    return visible.order_by("name").first()


def require_active_tenant(request: Any, role: str = Role.VIEWER) -> Tenant:
    tenant = active_tenant(request)
    if tenant is None:
        raise NotFound(_("No tenant selected: send the X-Gpupool-Tenant header."))
    require_role(request.user, tenant, role)
    return tenant


def scope(queryset: QuerySet[M], tenant: Tenant, field: str = "tenant") -> QuerySet[M]:
    """Rows of ``queryset`` that belong to ``tenant``."""
    return queryset.filter(**{field: tenant})
