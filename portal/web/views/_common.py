"""What every tenant page shares: sign-in, the active tenant, errors mapped to pages."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from portal.core.errors import NotFound, PermissionDenied
from portal.tenants import access
from portal.tenants.models import Role
from portal.web.formerrors import apply_errors  # noqa: F401  (re-exported for the views)

View = Callable[..., HttpResponse]


def translate_errors(func: View) -> View:
    """Another tenant's object is a 404; too weak a role is a 403."""

    @functools.wraps(func)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return func(request, *args, **kwargs)
        except NotFound as exc:
            raise Http404(exc.message) from exc
        except PermissionDenied as exc:
            raise DjangoPermissionDenied(exc.message) from exc

    return wrapper


def tenant_page(role: str = Role.VIEWER) -> Callable[[View], View]:
    """Sign-in required; ``request.tenant`` is the active tenant, checked for ``role``."""

    def decorate(func: View) -> View:
        @login_required
        @translate_errors
        @functools.wraps(func)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            tenant = access.active_tenant(request)
            if tenant is None and access.is_staff(request.user):
                return redirect("console:index")  # an operator acting for no tenant
            if tenant is None:
                return render(request, "web/no_tenant.html", status=200)
            access.require_role(request.user, tenant, role)
            request.tenant = tenant  # type: ignore[attr-defined]
            request.tenant_role = access.role_in(request.user, tenant)  # type: ignore[attr-defined]
            return func(request, *args, **kwargs)

        return wrapper

    return decorate


def can(request: HttpRequest, role: str) -> bool:
    """Whether the signed-in user holds ``role`` in the active tenant (staff: yes)."""
    if access.is_staff(request.user):
        return True
    current = getattr(request, "tenant_role", None)
    if current is None:
        return False
    from portal.tenants.models import ROLE_RANK

    return ROLE_RANK[Role(current)] >= ROLE_RANK[Role(role)]


