"""What the inventory app announces (portal/core/hooks.py)."""

from __future__ import annotations

from portal.core.hooks import Hook

# the storage endpoints of a fabric changed: the partition map must be re-derived
storage_changed: Hook[None] = Hook("inventory.storage_changed")
