"""Sign in through an operator's OIDC provider: the authorization-code flow with state,
nonce and PKCE (S256) always on. Every refusal ends on ``sso/refused.html`` in words."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import auth
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.crypto import get_random_string
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET
from mozilla_django_oidc.utils import generate_code_challenge

from portal.sso.backend import LoginRefused, ProviderBackend
from portal.sso.providers import ProviderError, UnknownProvider, discovery, provider_named

SESSION_KEY = "sso_states"
MAX_PENDING = 10
BACKEND_PATH = "portal.sso.backend.ProviderBackend"


def refused(request: HttpRequest, reason: str, status: int = 403) -> HttpResponse:
    return render(request, "sso/refused.html", {"reason": reason}, status=status)


def _callback_uri(request: HttpRequest, name: str) -> str:
    return request.build_absolute_uri(reverse("sso:callback", args=[name]))


def _safe_next(request: HttpRequest) -> str:
    nxt = request.GET.get("next", "")
    ok = url_has_allowed_host_and_scheme(nxt, allowed_hosts={request.get_host()},
                                         require_https=request.is_secure())
    return nxt if ok else ""


@require_GET
def start(request: HttpRequest, name: str) -> HttpResponse:
    try:
        provider = provider_named(name)
    except UnknownProvider as exc:
        return refused(request, str(exc), status=404)
    try:
        endpoint = discovery(provider)["authorization_endpoint"]
    except (ProviderError, KeyError) as exc:
        return refused(request, str(exc), status=502)
    state, nonce, verifier = (get_random_string(43) for _i in range(3))
    pending: dict[str, Any] = dict(request.session.get(SESSION_KEY, {}))
    while len(pending) >= MAX_PENDING:
        pending.pop(next(iter(pending)))
    pending[state] = {"provider": name, "nonce": nonce, "verifier": verifier,
                      "next": _safe_next(request)}
    request.session[SESSION_KEY] = pending
    params = {"response_type": "code", "client_id": provider.client_id,
              "scope": provider.scopes, "redirect_uri": _callback_uri(request, name),
              "state": state, "nonce": nonce, "code_challenge_method": "S256",
              "code_challenge": generate_code_challenge(verifier, "S256")}
    return HttpResponseRedirect(f"{endpoint}?{urlencode(params)}")


def _take_state(request: HttpRequest, name: str) -> dict[str, Any] | None:
    """The pending login this callback answers, removed from the session (a replayed
    ``state`` finds nothing)."""
    pending: dict[str, Any] = dict(request.session.get(SESSION_KEY, {}))
    entry = pending.pop(request.GET.get("state", ""), None)
    request.session[SESSION_KEY] = pending
    request.session.save()
    if entry is None or entry.get("provider") != name:
        return None
    return dict(entry)


@require_GET
def callback(request: HttpRequest, name: str) -> HttpResponse:
    entry = _take_state(request, name)
    if entry is None:
        return refused(request, _("This sign-in link was already used or has expired "
                                  "(unknown state). Please start again."), status=400)
    if request.GET.get("error"):
        return refused(request, _("The sign-in provider answered: %(error)s.") % {
            "error": request.GET.get("error_description") or request.GET["error"]})
    try:
        backend = ProviderBackend(provider_named(name))
        user = backend.login_with_code(
            request, code=request.GET.get("code", ""), nonce=entry["nonce"],
            redirect_uri=_callback_uri(request, name), code_verifier=entry["verifier"])
    except (LoginRefused, ProviderError) as exc:
        return refused(request, str(exc))
    if user is None:
        return refused(request, _("This account is deactivated."))
    auth.login(request, user, backend=BACKEND_PATH)
    return HttpResponseRedirect(entry["next"] or reverse("web:dashboard"))
