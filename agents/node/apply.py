"""Applies a node's desired state idempotently and describes what it observed."""

from __future__ import annotations

import logging
import threading
from typing import Any

from agents.node.access import AccessManager, Grant
from agents.node.ipoib import IpoibManager
from agents.node.partitions import check_partitions
from agents.sysfs.infiniband import IbDevice, InfinibandCollector

log = logging.getLogger("agents.node.apply")


class NodeApplier:
    def __init__(self, ib: InfinibandCollector, access: AccessManager,
                 ipoib: IpoibManager | None = None, ipoib_parent: str = "ib0") -> None:  # fmt: skip
        self.ib, self.access, self.ipoib, self.ipoib_parent = ib, access, ipoib, ipoib_parent
        self._lock = threading.RLock()
        self.generation_applied = 0
        self.generation_seen = 0
        self.desired: dict[str, Any] = {"partitions": [], "access_grants": []}
        self.errors: list[dict[str, str]] = []
        self.last_devices: list[IbDevice] | None = None  # latest sample's, to avoid re-reading

    def observe_devices(self, devices: list[IbDevice]) -> None:
        self.last_devices = devices

    def apply(self, desired: dict[str, Any]) -> None:
        with self._lock:  # long-poll thread applies while the loop reports
            self._apply(desired)

    def _apply(self, desired: dict[str, Any]) -> None:
        generation = int(desired["generation"])
        self.generation_seen = max(self.generation_seen, generation)
        if generation < self.generation_applied:
            return  # stale
        self.desired = desired
        self.errors = []
        self._grants(desired.get("access_grants", []))
        self._ipoib(desired.get("partitions", []))
        if not self.errors:
            self.generation_applied = generation
        log.info("desired state applied", extra={"generation": generation,
                                                 "errors": len(self.errors)})  # fmt: skip

    def _grants(self, grants: list[dict[str, Any]]) -> None:
        wanted = {g["account"]: Grant.from_wire(g) for g in grants}
        for account in set(self.access.present()) - set(wanted):
            self._try(f"access_grants/{account}/revoke", lambda a=account: self.access.revoke(a))
        for account, grant in wanted.items():
            self._try(f"access_grants/{account}", lambda g=grant: self.access.apply(g))

    def _ipoib(self, partitions: list[dict[str, Any]]) -> None:
        if self.ipoib is None:
            return
        mine = {p.port_guid for d in self.ib.collect() for p in d.ports if p.port_guid}
        want = {
            int(p["pkey"], 16) | 0x8000
            for p in partitions
            if p.get("ipoib") and mine & set(p.get("port_guids", []))
        }
        parent, mgr = self.ipoib_parent, self.ipoib
        have = set(mgr.children(parent).values())
        for pkey in sorted(have - want):
            self._try(f"ipoib/{pkey:#06x}/remove", lambda k=pkey: mgr.remove(parent, k))
        for pkey in sorted(want - have):
            self._try(f"ipoib/{pkey:#06x}", lambda k=pkey: mgr.create(parent, k))

    def _try(self, item: str, fn: Any) -> None:
        try:
            fn()
        except Exception as exc:  # any failure becomes an apply error, never a crash
            log.error("apply failed", extra={"item": item, "error": str(exc)})
            self.errors.append({"item": item, "message": f"{type(exc).__name__}: {exc}"})

    def observed(self) -> dict[str, Any]:
        with self._lock:
            return self._observed()

    def _observed(self) -> dict[str, Any]:
        children: list[dict[str, Any]] = []
        if self.ipoib is not None:
            kids = sorted(self.ipoib.children(self.ipoib_parent).items())
            children = [
                {"parent": self.ipoib_parent, "name": n, "pkey": f"0x{k:04x}"} for n, k in kids
            ]
        return {
            "generation_applied": self.generation_applied,
            "generation_seen": self.generation_seen,
            "apply_errors": list(self.errors),
            "partitions": check_partitions(
                self.last_devices if self.last_devices is not None else self.ib.collect(),
                self.desired,
            ),
            "ipoib_children": children,
            "access_grants": [
                {"account": a, "lease_id": lease, "state": "present"}
                for a, lease in sorted(self.access.present().items())
            ],
        }
