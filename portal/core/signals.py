"""Sign-in events into the audit log (receivers only translate; the service records)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver

from portal.core.services import audit_record


@receiver(user_logged_in)
def _on_login(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    audit_record(actor=user, action="auth.login")


@receiver(user_logged_out)
def _on_logout(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is not None:
        audit_record(actor=user, action="auth.logout")


@receiver(user_login_failed)
def _on_login_failed(sender: Any, credentials: dict[str, Any], request: Any = None,
                     **kwargs: Any) -> None:
    username = str(credentials.get("username", ""))[:150]
    audit_record(actor=None, action="auth.login_failed", actor_repr=username or "unknown",
                 changes={"username": username})
