"""Faults injected into a RUNNING ``agents.sim.fleet`` (``--control PATH``).

JSON lines, re-read every loop (only lines appended since the last read), one fault per
line for the identity with host name ``host``:

    {"host": H, "gpu": 3, "xid": 79}          XID event (xid_events, last_xid, healthy)
    {"host": H, "gpu": 1, "ecc_dbe": 1}       volatile uncorrected ECC count += 1
    {"host": H, "gpu": 1, "remap": "pending"} row remap pending (or "failure")
    {"host": H, "port_down": ["mlx5_0", 1]}   port DOWN / Disabled, link_downed + 1
    {"host": H, "silent": true}               agent death: no reports, no long-polls
    {"host": H, "silent": false}              the agent is back (reports at once)
    {"host": H, "clear": true}                repaired: every fault of H gone, not silent
                                              (with "gpu": that GPU's faults only)

A node shows its faults in its reports exactly as the real agent's collectors would
(``agents.telemetry.to_wire``'s fields); a validation request runs the agent's own
checks (``agents.node.validate``) on that faulted telemetry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from agents.nvml.collector import CRITICAL_XIDS
from agents.nvml.faults import FaultError, LineFollower

log = logging.getLogger("agents.sim.faults")
PortKey = tuple[str, int]


@dataclass
class GpuFault:
    xid: int | None = None
    ecc_dbe: int = 0
    remap: str | None = None  # "pending" / "failure"


@dataclass
class NodeFaults:
    gpus: dict[int, GpuFault] = field(default_factory=dict)
    ports_down: set[PortKey] = field(default_factory=set)
    link_downed: dict[PortKey, int] = field(default_factory=dict)  # counters never go back
    xid_events: list[dict[str, Any]] = field(default_factory=list)  # for the next report
    silent: bool = False
    awake: asyncio.Event = field(default_factory=asyncio.Event)
    silenced: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.awake.set()

    @property
    def present(self) -> bool:
        return bool(self.gpus or self.ports_down)

    def set_silent(self, silent: bool) -> None:
        self.silent = silent
        (self.silenced if silent else self.awake).set()
        (self.awake if silent else self.silenced).clear()

    def clear(self, gpu: int | None = None) -> None:
        if gpu is not None:
            self.gpus.pop(gpu, None)
            return
        self.gpus.clear()
        self.ports_down.clear()
        self.set_silent(False)

    # --- what the node's reports show ------------------------------------------------
    def decorate(self, sample: dict[str, Any], drain: bool) -> dict[str, Any]:
        """``sample`` (one telemetry item) as the faulted hardware reads."""
        sample["gpus"] = [self._gpu(g) for g in sample["gpus"]]
        sample["ib_ports"] = [self._port(p) for p in sample["ib_ports"]]
        if self.xid_events:
            sample["xid_events"] = [*sample.get("xid_events", []), *self.xid_events]
            if drain:  # each event is reported once, as the agent's watcher drains it
                self.xid_events = []
        return sample

    def _gpu(self, gpu: dict[str, Any]) -> dict[str, Any]:
        fault = self.gpus.get(int(gpu["index"]))
        if fault is None:
            return gpu
        out = {**gpu, "unhealthy_reasons": list(gpu.get("unhealthy_reasons", []))}
        if fault.xid is not None:
            out["last_xid"] = fault.xid
            if fault.xid in CRITICAL_XIDS:
                out["healthy"] = False
                out["unhealthy_reasons"].append(f"xid {fault.xid}")
            if fault.xid == 79:
                out["lost"] = True
                out["unhealthy_reasons"].append("gpu_is_lost")
        if fault.ecc_dbe:
            out["ecc_uncorrected_volatile"] = int(gpu.get("ecc_uncorrected_volatile", 0)) \
                + fault.ecc_dbe
        if fault.remap is not None:
            out[f"remapped_rows_{fault.remap}"] = True
            out["remapped_rows_uncorrectable"] = int(gpu.get("remapped_rows_uncorrectable",
                                                             0)) + 1
        return out

    def _port(self, port: dict[str, Any]) -> dict[str, Any]:
        key = (str(port["device"]), int(port["port"]))
        downed = self.link_downed.get(key, 0)
        if key not in self.ports_down and not downed:
            return port
        out = {**port, "counters": {**port["counters"],
                                    "link_downed": port["counters"].get("link_downed", 0)
                                    + downed}}  # fmt: skip
        if key in self.ports_down:
            out.update(state="DOWN", state_id=1, phys_state="Disabled", phys_state_id=3)
        return out

    # --- control lines ---------------------------------------------------------------
    def apply(self, line: dict[str, Any], uuids: list[str], now: float) -> str:
        """Apply one control line (its ``host`` already matched); returns its kind."""
        if "silent" in line:
            self.set_silent(_bool(line, "silent"))
            return "silent"
        if "clear" in line:
            self.clear(_gpu_index(line, uuids) if "gpu" in line else None)
            return "clear"
        if "port_down" in line:
            self._port_down(line["port_down"])
            return "port_down"
        return self._gpu_fault(line, uuids, now)

    def _port_down(self, value: Any) -> None:
        if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
                and isinstance(value[1], int) and not isinstance(value[1], bool)):
            raise FaultError('port_down: must be ["<device>", <port>]')
        key = (value[0], value[1])
        self.ports_down.add(key)
        self.link_downed[key] = self.link_downed.get(key, 0) + 1

    def _gpu_fault(self, line: dict[str, Any], uuids: list[str], now: float) -> str:
        index = _gpu_index(line, uuids)
        if "xid" in line:
            xid = _int(line, "xid")
            self.gpus.setdefault(index, GpuFault()).xid = xid
            self.xid_events.append({"gpu_uuid": uuids[index], "xid": xid, "ts": round(now, 3)})
            return "xid"
        if "ecc_dbe" in line:
            count = _int(line, "ecc_dbe")
            self.gpus.setdefault(index, GpuFault()).ecc_dbe += count
            return "ecc_dbe"
        if line.get("remap") in ("pending", "failure"):
            self.gpus.setdefault(index, GpuFault()).remap = str(line["remap"])
            return "remap"
        raise FaultError("needs one of xid, ecc_dbe, remap (pending|failure), port_down, "
                         "silent, clear")


def _int(line: dict[str, Any], key: str) -> int:
    value = line[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise FaultError(f"{key}: must be an integer >= 0")
    return value


def _bool(line: dict[str, Any], key: str) -> bool:
    if not isinstance(line[key], bool):
        raise FaultError(f"{key}: must be true or false")
    return bool(line[key])


def _gpu_index(line: dict[str, Any], uuids: list[str]) -> int:
    index = line.get("gpu")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(uuids):
        raise FaultError(f"gpu: must be an index 0..{len(uuids) - 1}")
    return index


async def unless_silenced(faults: NodeFaults, call: Any) -> Any:
    """``call``'s answer, or None: the node was silenced meanwhile and the request is
    dropped (its connection closed), as when an agent dies mid long-poll."""
    task = asyncio.ensure_future(call)
    silenced = asyncio.ensure_future(faults.silenced.wait())
    await asyncio.wait({task, silenced}, return_when=asyncio.FIRST_COMPLETED)
    silenced.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None


class ControlFile:
    """The simulator's control file: ``poll`` applies new lines to the named nodes and
    returns the nodes that changed (each gets a report at once)."""

    def __init__(self, path: Any, nodes: dict[str, Any]) -> None:
        self.lines, self.nodes = LineFollower(path), nodes  # hostname -> SimNode
        self.applied = 0
        self.skipped = 0

    def poll(self) -> list[Any]:
        changed = []
        for line in self.lines.read():
            node = self._one(line)
            if node is not None and node not in changed:
                changed.append(node)
        return changed

    def _one(self, line: Any) -> Any:
        try:
            if isinstance(line, FaultError):
                raise line
            if not isinstance(line, dict) or not isinstance(line.get("host"), str) \
                    or line["host"] not in self.nodes:
                raise FaultError("host: must name a simulated node")
            node = self.nodes[line["host"]]
            kind = node.faults.apply(line, node.gpu_uuids, time.time())
        except FaultError as exc:
            self.skipped += 1
            log.warning("bad control line skipped", extra={"error": str(exc)[:200]})
            return None
        self.applied += 1
        log.info("fault applied", extra={"host": line["host"], "kind": kind})
        return node
