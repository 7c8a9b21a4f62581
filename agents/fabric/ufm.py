"""NVIDIA UFM driver (REST, basic auth over HTTPS; see reference/infiniband.md)."""

from __future__ import annotations

from typing import Any

import httpx

from agents.fabric.base import Membership, PartitionMap


def _bare(guid: str) -> str:
    """UFM wants 16 hex digits, no ``0x``, no colons."""
    return guid.lower().removeprefix("0x").replace(":", "").zfill(16)


def _ours(guid: str) -> str:
    return "0x" + _bare(guid)


class UfmManager:
    name = "ufm"

    def __init__(self, base_url: str, username: str, password: str,
                 transport: httpx.BaseTransport | None = None, verify: bool | str = True,
                 managed_pkeys: set[int] | None = None) -> None:  # fmt: skip
        self.http = httpx.Client(base_url=base_url.rstrip("/"), auth=(username, password),
                                 transport=transport, verify=verify, timeout=30.0)  # fmt: skip
        # keys this agent created; others on the fabric are left alone
        self.managed: set[int] = set(managed_pkeys or set())

    def health(self) -> str:
        resp = self.http.get("/ufmRest/app/ufm_version")
        resp.raise_for_status()
        return str(resp.json().get("ufm_release_version", resp.text))

    def _current(self) -> dict[int, Membership]:
        resp = self.http.get("/ufmRest/resources/pkeys/", params={"guids_data": "true"})
        resp.raise_for_status()
        return parse_pkeys(resp.json())

    def apply(self, pmap: PartitionMap) -> None:
        current = self._current()
        wanted = pmap.expected()
        for p in pmap.partitions:
            key = f"0x{p.pkey:04x}"
            if p.pkey not in current:
                self._post("/ufmRest/resources/pkeys/add", {
                    "pkey": key, "index0": False, "ip_over_ib": p.ipoib,
                })  # fmt: skip
            for membership in ("full", "limited"):
                guids = [_bare(g) for g, m in p.members if m == membership
                         and current.get(p.pkey, {}).get(_ours(g)) != membership]  # fmt: skip
                if guids:
                    self._post("/ufmRest/resources/pkeys", {
                        "pkey": key, "guids": guids, "membership": membership,
                        "index0": False, "ip_over_ib": p.ipoib,
                    })  # fmt: skip
            self.managed.add(p.pkey)
        for pkey in sorted(self.managed):
            extra = [_bare(g) for g in current.get(pkey, {}) if g not in wanted.get(pkey, {})]
            if extra:
                self._post("/ufmRest/actions/remove_guids_from_pkey",
                           {"pkey": f"0x{pkey:04x}", "guids": extra})  # fmt: skip

    def _post(self, path: str, body: dict[str, Any]) -> None:
        resp = self.http.post(path, json=body)
        resp.raise_for_status()

    def read_back(self, guids: set[str]) -> dict[int, Membership]:
        return {k: {g: m for g, m in v.items() if g in guids}
                for k, v in self._current().items() if k != 0x7FFF}  # fmt: skip


def parse_pkeys(body: Any) -> dict[int, Membership]:
    """``{"0x0a12": {"guids": [{"guid": "0002…", "membership": "full"}, …], …}, …}``."""
    out: dict[int, Membership] = {}
    if not isinstance(body, dict):
        return out
    for key, info in body.items():
        try:
            pkey = int(key, 16) & 0x7FFF
        except (TypeError, ValueError):
            continue
        members = out.setdefault(pkey, {})
        for g in (info or {}).get("guids", []) if isinstance(info, dict) else []:
            members[_ours(str(g.get("guid", "")))] = str(g.get("membership", "limited"))
    return out
