"""Named events between apps, so that a lower app announces and a higher one reacts
without the lower importing the higher (the import contracts forbid that cycle).

An app declares a hook where the event happens (``tenants.hooks.access_changed``) and the
app that reacts connects to it at start-up (``AppConfig.ready``). ``emit_on_commit`` runs
the receivers after the caller's transaction commits, never if it rolls back, so a refused
change announces nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from django.db import transaction

log = logging.getLogger(__name__)

T = TypeVar("T")


class Hook(Generic[T]):
    def __init__(self, name: str) -> None:
        self.name = name
        self._receivers: list[Callable[[T], object]] = []

    def connect(self, receiver: Callable[[T], object]) -> None:
        """Register ``receiver(payload)`` (once; connecting it again is a no-op)."""
        if receiver not in self._receivers:
            self._receivers.append(receiver)

    def emit(self, payload: T) -> None:
        for receiver in list(self._receivers):
            receiver(payload)

    def emit_on_commit(self, payload: T) -> None:
        transaction.on_commit(lambda: self.emit(payload))
