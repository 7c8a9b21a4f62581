"""The one gate to tenant data (architecture house rules 2 and 11).

Every API view, page, export and WebSocket consumer resolves the caller's tenant here and
scopes its querysets with :func:`scope`. The gate decides on the *principal* — the user
and the credential they presented (``portal/tenants/principal.py``) — so an API key acts
only for its own tenant, on every route, even when its user belongs to other tenants.
Each function takes a principal or a user; a user that authenticated with a key carries
that key's principal, so passing ``request.user`` (or a service's ``actor``) is enough.

Not being able to act for a tenant looks exactly like the tenant not existing (404); being
a member with too weak a role is a 403.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.db.models import Model, QuerySet
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from portal.core.errors import NotFound, PermissionDenied
from portal.tenants.models import ROLE_RANK, Membership, Role, Tenant
from portal.tenants.principal import AnyUser, Principal, of_request, principal_of

M = TypeVar("M", bound=Model)
Who = Principal | AnyUser | None

# Role names for messages, in the active language (the same msgids as portal/web/labels.py).
ROLE_LABELS = {Role.OWNER: gettext_lazy("Owner"), Role.ADMIN: gettext_lazy("Admin"),
               Role.MEMBER: gettext_lazy("Member"), Role.VIEWER: gettext_lazy("Viewer")}

TENANT_HEADER = "HTTP_X_GPUPOOL_TENANT"
SESSION_KEY = "active_tenant"

__all__ = ["AnyUser", "Principal", "Who", "active_tenant", "get_tenant", "is_staff",
           "membership", "of_request", "principal_of", "require_active_tenant",
           "require_role", "role_in", "scope", "tenants_for"]


def is_staff(who: Who) -> bool:
    """Platform-wide staff powers: a staff user, unless acting through a tenant's key."""
    return principal_of(who).platform_staff


def _roles_at_least(role: str) -> list[str]:
    return [r for r in Role if ROLE_RANK[r] >= ROLE_RANK[Role(role)]]


def tenants_for(who: Who, role: str = Role.VIEWER) -> QuerySet[Tenant]:
    """Tenants the principal may act for with at least ``role``: every tenant for platform
    staff; for anyone else their memberships, narrowed to the key's tenant for a key."""
    p = principal_of(who)
    if not p.authenticated:
        return Tenant.objects.none()
    if p.platform_staff:
        return Tenant.objects.all()
    if p.via_key:
        if p.key_tenant is None:
            return Tenant.objects.none()
        qs = Tenant.objects.filter(pk=p.key_tenant.pk)
        return qs if p.staff_user else qs.filter(
            memberships__user=p.user, memberships__role__in=_roles_at_least(role))
    return Tenant.objects.filter(memberships__user=p.user,
                                 memberships__role__in=_roles_at_least(role)).distinct()


def membership(who: Who, tenant: Tenant) -> Membership | None:
    """The principal's membership in ``tenant``; None when its credential may not act there."""
    p = principal_of(who)
    if not p.allows(tenant):
        return None
    return Membership.objects.filter(user=p.user, tenant=tenant).first()


def get_tenant(who: Who, slug: str, *, role: str = Role.VIEWER) -> Tenant:
    """The tenant ``slug`` if the principal may act for it with at least ``role``."""
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise NotFound(_("No such tenant."))
    require_role(who, tenant, role)
    return tenant


def require_role(who: Who, tenant: Tenant, role: str) -> None:
    """404 for strangers and for another tenant's key, 403 for members whose role is too
    weak. Staff pass (a staff key: in its own tenant only)."""
    p = principal_of(who)
    if not p.allows(tenant):
        raise NotFound(_("No such tenant."))
    if p.staff_user:
        return
    member = membership(p, tenant)
    if member is None:
        raise NotFound(_("No such tenant."))
    if not member.has_role(role):
        raise PermissionDenied(_("This needs the %(role)s role or higher.")
                               % {"role": str(ROLE_LABELS[Role(role)]).lower()})


def role_in(who: Who, tenant: Tenant) -> str | None:
    member = membership(who, tenant)
    return member.role if member else None


def active_tenant(request: Any) -> Tenant | None:
    """The tenant a request acts for.

    Order: the ``X-Gpupool-Tenant`` header (refused, 404, when the principal may not act
    for it — for a key, any tenant but its own); the API key's tenant; the session's
    switcher choice; the user's only (or first) tenant. A session choice the user can no
    longer see is ignored.
    """
    p = of_request(request)
    if not p.authenticated:
        return None
    header = request.META.get(TENANT_HEADER)
    if header:
        return get_tenant(p, header)
    if p.via_key:
        return p.key_tenant
    session = getattr(request, "session", None)
    visible = tenants_for(p)
    slug = session.get(SESSION_KEY) if session is not None else None
    if slug:
        chosen = visible.filter(slug=slug).first()
        if chosen is not None:
            return chosen
    if p.platform_staff:
        return None
    return visible.order_by("name").first()


def require_active_tenant(request: Any, role: str = Role.VIEWER) -> Tenant:
    tenant = active_tenant(request)
    if tenant is None:
        raise NotFound(_("No tenant selected: send the X-Gpupool-Tenant header."))
    require_role(of_request(request), tenant, role)
    return tenant


def scope(queryset: QuerySet[M], tenant: Tenant, field: str = "tenant") -> QuerySet[M]:
    """Rows of ``queryset`` that belong to ``tenant``."""
    return queryset.filter(**{field: tenant})
