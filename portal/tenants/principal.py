"""Who is acting, and with which credential: the value the tenant gate decides on.

A request is made by a *principal*: a user plus the credential they presented. A browser
session acts for every tenant the user belongs to; an API key acts for its own tenant only
(README: "a key acts for its tenant"). The authentication layer resolves it once per request
(:func:`bind_key` in ``portal/tenants/authentication.py``) and ties it to the very user
object that DRF hands to views and services as ``request.user``/``actor``, so every check
that receives that user (``access.require_role`` in a service, a selector, a view) applies
the key's scope without the caller having to remember it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from portal.tenants.models import ApiKey, Tenant

AnyUser = AbstractBaseUser | AnonymousUser
Credential = Literal["anonymous", "session", "api_key"]
_ATTR = "_gpupool_principal"


@dataclass(frozen=True)
class Principal:
    user: Any
    credential: Credential
    key_id: Any = None
    key_tenant: Tenant | None = None

    @property
    def authenticated(self) -> bool:
        return self.credential != "anonymous"

    @property
    def via_key(self) -> bool:
        return self.credential == "api_key"

    @property
    def staff_user(self) -> bool:
        """The user is platform staff (whatever the credential)."""
        return bool(self.authenticated and getattr(self.user, "is_staff", False))

    @property
    def platform_staff(self) -> bool:
        """Staff powers across the platform: a staff session, or a staff key bound to no
        tenant. A staff key bound to a tenant acts for that tenant only."""
        return self.staff_user and self.key_tenant is None

    def allows(self, tenant: Tenant | Any) -> bool:
        """Whether the credential may act for ``tenant`` (a Tenant or its id) at all; the
        role is checked separately. A key acts only for its own tenant; a key bound to no
        tenant acts for none unless it is a staff key."""
        if not self.authenticated:
            return False
        if not self.via_key or self.platform_staff:
            return True
        tenant_id = getattr(tenant, "pk", tenant)
        return self.key_tenant is not None and tenant_id == self.key_tenant.pk


def bind_key(user: Any, key: ApiKey) -> Principal:
    """Record on ``user`` (the instance this request authenticated) that it acts via ``key``."""
    principal = Principal(user=user, credential="api_key", key_id=key.pk, key_tenant=key.tenant)
    setattr(user, _ATTR, principal)
    return principal


def principal_of(who: Principal | AnyUser | None) -> Principal:
    """The principal of a user (with the credential bound to it, if any) or a principal."""
    if isinstance(who, Principal):
        return who
    bound = getattr(who, _ATTR, None)
    if isinstance(bound, Principal):
        return bound
    if who is None or not who.is_authenticated:
        return Principal(user=who, credential="anonymous")
    return Principal(user=who, credential="session")


def of_request(request: Any) -> Principal:
    """The principal of an HTTP request (DRF or plain Django): its user and credential."""
    return principal_of(getattr(request, "user", None))
