"""Template helpers for the tenant pages: navigation state, labels, tones, bars."""

from __future__ import annotations

from typing import Any

from django import template

from portal.tenants import access
from portal.web import labels, waits

register = template.Library()


@register.simple_tag(takes_context=True)
def nav_state(context: template.Context) -> dict[str, Any]:
    """Tenants for the switcher and the active one (one query; none when signed out)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"tenants": [], "active": None}
    tenants = list(access.tenants_for(user).order_by("name")[:50])
    active = getattr(request, "tenant", None)
    if active is None:
        slug = request.session.get(access.SESSION_KEY)
        active = next((t for t in tenants if t.slug == slug), None)
        if active is None and not access.is_staff(user) and tenants:
            active = tenants[0]
    return {"tenants": tenants, "active": active, "role": getattr(request, "tenant_role", None)}


@register.filter
def label(value: Any) -> Any:
    """The translated label of a state, role, priority or locality value."""
    return labels.ALL.get(str(value), value)


@register.filter
def tone(state: Any) -> str:
    return labels.TONES.get(str(state), "muted")


@register.filter
def event_kind(kind: Any) -> Any:
    return labels.EVENT_KINDS.get(str(kind), kind)


@register.filter
def get(mapping: Any, key: Any) -> Any:
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def models_of(lease: Any) -> str:
    """The model a lease runs on, or the models it accepts while waiting."""
    return lease.gpu_model or " / ".join(lease.allowed_models or [])


@register.filter
def reason(text: Any) -> Any:
    """A leasing event reason in the page's language when it is one of the fixed ones
    (or one of the fixed patterns with a number or a lease id in it)."""
    found = labels.REASONS.get(str(text))
    if found is not None:
        return found
    return labels.reason_pattern(str(text)) or text


# How a lease's state, start, end and wait read on a page (portal/web/waits.py).
register.filter("shown_state", waits.shown_state)
register.filter("shown_start", waits.shown_start)
register.filter("shown_end", waits.shown_end)
register.filter("wait_sentence", waits.lease_wait)
register.filter("quote_wait", waits.quote_wait)


@register.filter
def choice(value: Any, kind: str) -> Any:
    """The translated label of a console choice (``labels.CHOICES``); the value if unknown."""
    return labels.CHOICES.get(kind, {}).get(str(value), value)


@register.filter
def pkey(value: Any) -> str:
    """One P_Key notation everywhere: the full-membership key a tenant's hosts see
    (``0x8100`` for partition 0x0100), as the lease page shows it."""
    try:
        return f"0x{int(str(value), 0) | 0x8000:04x}"
    except (TypeError, ValueError):
        return str(value)


@register.filter
def changes_text(changes: Any) -> list[str]:
    """An audit entry's changes as lines a person reads: ``field: old → new`` or
    ``field: value``, nested values flattened (was a Python dict dump)."""
    if not isinstance(changes, dict):
        return [str(changes)] if changes else []
    out = []
    for key, value in changes.items():
        if isinstance(value, list) and len(value) == 2:
            out.append(f"{key}: {_plain(value[0])} → {_plain(value[1])}")
        else:
            out.append(f"{key}: {_plain(value)}")
    return out


def _plain(value: Any) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_plain(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value)
    return str(value)
