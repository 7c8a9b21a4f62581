"""Template helpers for the tenant pages: navigation state, labels, tones, bars."""

from __future__ import annotations

from typing import Any

from django import template

from portal.tenants import access
from portal.web import labels

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
    """A leasing event reason in the page's language when it is one of the fixed ones."""
    return labels.REASONS.get(str(text), text)


@register.filter
def shown_state(lease: Any) -> str:
    from portal.web import waits

    return waits.shown_state(lease)


@register.filter
def shown_start(lease: Any) -> Any:
    from portal.web import waits

    return waits.shown_start(lease)


@register.filter
def wait_sentence(lease: Any) -> str:
    from portal.web import waits

    return waits.lease_wait(lease)


@register.filter
def quote_wait(quote: Any) -> str:
    from portal.web import waits

    return waits.quote_wait(quote)
