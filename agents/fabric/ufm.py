"""NVIDIA UFM driver (REST, basic auth over HTTPS; see reference/infiniband.md).

What the driver manages is derived from UFM's own P_Key list on every apply, never kept in
memory: a key is ours when it lies in the project's key range and its UFM name is ours
(the ``managed_prefix`` the portal gives partition names, or UFM's default
``api_pkey_0x…`` for a key created over REST). Keys an operator made and named by hand,
and keys outside the range, are never touched."""

from __future__ import annotations

from typing import Any

import httpx

from agents.fabric.base import Membership, Partition, PartitionMap

DEFAULT_RANGE = (0x0100, 0x7FFE)  # the portal's GPUPOOL_PKEY_RANGE default
DEFAULT_PREFIX = "tenant_"


def _bare(guid: str) -> str:
    """UFM wants 16 hex digits, no ``0x``, no colons."""
    return guid.lower().removeprefix("0x").replace(":", "").zfill(16)


def _ours(guid: str) -> str:
    return "0x" + _bare(guid)


class UfmManager:
    name = "ufm"

    def __init__(self, base_url: str, username: str, password: str,
                 transport: httpx.BaseTransport | None = None, verify: bool | str = True,
                 managed_range: tuple[int, int] = DEFAULT_RANGE,
                 managed_prefix: str = DEFAULT_PREFIX) -> None:  # fmt: skip
        self.http = httpx.Client(base_url=base_url.rstrip("/"), auth=(username, password),
                                 transport=transport, verify=verify, timeout=30.0)  # fmt: skip
        self.managed_range, self.managed_prefix = managed_range, managed_prefix

    def health(self) -> str:
        resp = self.http.get("/ufmRest/app/ufm_version")
        resp.raise_for_status()
        return str(resp.json().get("ufm_release_version", resp.text))

    def _listing(self) -> dict[str, Any]:
        resp = self.http.get("/ufmRest/resources/pkeys/", params={"guids_data": "true"})
        resp.raise_for_status()
        body = resp.json()
        return body if isinstance(body, dict) else {}

    def is_ours(self, pkey: int, name: str | None) -> bool:
        lo, hi = self.managed_range
        if not lo <= pkey <= hi:
            return False
        return not name or name.startswith(self.managed_prefix) or name == f"api_pkey_{pkey:#x}"

    def managed(self) -> dict[int, Membership]:
        listing = self._listing()
        names = parse_names(listing)
        return {k: v for k, v in parse_pkeys(listing).items() if self.is_ours(k, names.get(k))}

    def apply(self, pmap: PartitionMap) -> None:
        listing = self._listing()
        current, index0 = parse_pkeys(listing), parse_index0(listing)
        for p in pmap.partitions:
            self._apply_partition(p, current, index0)
        wanted = pmap.expected()
        names = parse_names(listing)
        for pkey in sorted(current):
            if pkey not in wanted and not self.is_ours(pkey, names.get(pkey)):
                continue  # not ours: an operator's key, left alone
            extra = [_bare(g) for g in current[pkey] if g not in wanted.get(pkey, {})]
            if extra:
                self._post("/ufmRest/actions/remove_guids_from_pkey",
                           {"pkey": f"0x{pkey:04x}", "guids": extra})  # fmt: skip

    def _apply_partition(self, p: Partition, current: dict[int, Membership],
                         index0: dict[str, set[int]]) -> None:  # fmt: skip
        key = f"0x{p.pkey:04x}"
        have = current.get(p.pkey, {})
        if p.pkey not in current:
            self._post("/ufmRest/resources/pkeys/add",
                       {"pkey": key, "index0": bool(p.index0), "ip_over_ib": p.ipoib})
        for membership, at0, guids in p.groups():
            todo = [_bare(g) for g in guids
                    if have.get(g) != membership or (p.pkey in index0.get(g, set())) != at0]
            if todo:
                self._post("/ufmRest/resources/pkeys", {
                    "pkey": key, "guids": todo, "membership": membership,
                    "index0": at0, "ip_over_ib": p.ipoib,
                })  # fmt: skip

    def _post(self, path: str, body: dict[str, Any]) -> None:
        resp = self.http.post(path, json=body)
        resp.raise_for_status()

    def read_back(self, guids: set[str]) -> dict[int, Membership]:
        return {k: {g: m for g, m in v.items() if g in guids}
                for k, v in parse_pkeys(self._listing()).items() if k != 0x7FFF}  # fmt: skip

    def read_index0(self, guids: set[str]) -> dict[str, int]:
        return _index0_of(self._listing(), guids)


def _index0_of(listing: dict[str, Any], guids: set[str]) -> dict[str, int]:
    """UFM's view: the key each port holds with ``index0`` set (UFM places it at 0)."""
    out: dict[str, int] = {}
    for guid, keys in parse_index0(listing).items():
        if guid in guids and len(keys) == 1:
            out[guid] = next(iter(keys))
    return out


def _entries(body: Any) -> list[tuple[int, dict[str, Any]]]:
    out: list[tuple[int, dict[str, Any]]] = []
    for key, info in (body.items() if isinstance(body, dict) else []):
        try:
            pkey = int(key, 16) & 0x7FFF
        except (TypeError, ValueError):
            continue
        out.append((pkey, info if isinstance(info, dict) else {}))
    return out


def _guids(info: dict[str, Any]) -> list[dict[str, Any]]:
    return [g for g in info.get("guids") or [] if isinstance(g, dict)]


def parse_pkeys(body: Any) -> dict[int, Membership]:
    """``{"0x0a12": {"guids": [{"guid": "0002…", "membership": "full"}, …], …}, …}``."""
    out: dict[int, Membership] = {}
    for pkey, info in _entries(body):
        members = out.setdefault(pkey, {})
        for g in _guids(info):
            members[_ours(str(g.get("guid", "")))] = str(g.get("membership", "limited"))
    return out


def parse_names(body: Any) -> dict[int, str]:
    """UFM's name of each key (``partition``), where it reports one."""
    return {pkey: str(info["partition"]) for pkey, info in _entries(body)
            if info.get("partition")}  # fmt: skip


def parse_index0(body: Any) -> dict[str, set[int]]:
    """Port GUID -> keys UFM holds for it with ``index0`` set."""
    out: dict[str, set[int]] = {}
    for pkey, info in _entries(body):
        for g in _guids(info):
            if g.get("index0") is True:
                out.setdefault(_ours(str(g.get("guid", ""))), set()).add(pkey)
    return out
