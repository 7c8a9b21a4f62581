"""One simulated node identity for ``agents.sim.fleet``: what it reports and how it applies.

Telemetry comes from ONE sample of the real sampler (fake NVML ``h100x8`` + a fake sysfs
tree), re-labelled per node (hostname, GPU UUIDs, port GUIDs, current P_Keys) with moving
counters, so reports have the production shape and size without 10,000 sysfs trees.
Observed partitions are computed by the agent's own ``check_partitions``; the simulated
subnet manager gives each port exactly the keys its desired state asks for. Faults
injected from the simulator's control file (``agents.sim.faults``) show in the telemetry;
a desired ``validation`` runs the agent's own checks on it (``agents.node.validate``).
"""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents import protocol
from agents.node.dcgm import NOT_INSTALLED
from agents.node.partitions import check_partitions, expected_pkeys
from agents.node.validate import Baseline, hardware_checks, result
from agents.sim.faults import NodeFaults
from agents.sysfs.infiniband import IbDevice, IbPort

Port = tuple[str, int, str, str]  # device, port, port GUID (0x…), node GUID (0x…)


def telemetry_template(gpus: str = "h100x8") -> dict[str, Any]:
    """One real sample (``to_wire``) of a fake node: the shape every report copies."""
    from agents.host import HostCollector, write_fake_proc
    from agents.nvml.collector import NvmlCollector
    from agents.nvml.fake import FakeNvml
    from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas
    from agents.sysfs.infiniband import InfinibandCollector
    from agents.telemetry import Sampler, to_wire

    with tempfile.TemporaryDirectory(prefix="gpupool-simnode-") as tmp:
        root = Path(tmp)
        writer = FakeSysfsWriter(root / "sys", pkey_table_size=16)
        for hca in gpu_node_hcas(1, 1):
            writer.add(hca)
        write_fake_proc(root / "proc", "template")
        api = FakeNvml(gpus, host="template", seed=1)
        api.nvmlInit()
        sampler = Sampler(HostCollector(root / "proc"), InfinibandCollector(root / "sys"),
                          NvmlCollector(api))
        return to_wire(sampler.sample())


def _guid(index: int, salt: int) -> str:
    return f"0x{0x0002C90300000000 + index * 16 + salt:016x}"


def _uuid(hostname: str, index: int) -> str:
    h = hashlib.sha256(f"{hostname}/{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _colon_guid(guid: str) -> str:
    h = guid[2:]
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


@dataclass
class SimNode:
    index: int
    hostname: str
    token: str
    ports: list[Port]
    gpu_uuids: list[str]
    template: dict[str, Any]
    agent_version: str
    node_id: str = ""
    credential: str = ""
    seq: int = 0
    generation_seen: int = 0
    generation_applied: int = 0
    desired: dict[str, Any] = field(default_factory=lambda: {"partitions": []})
    pkeys: dict[str, list[str]] = field(default_factory=dict)  # port GUID -> table
    bytes_moved: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    faults: NodeFaults = field(default_factory=NodeFaults)
    validation: dict[str, Any] | None = None

    @classmethod
    def build(cls, index: int, hostname: str, token: str, known: dict[str, Any] | None,
              template: dict[str, Any], agent_version: str) -> SimNode:  # fmt: skip
        gpus = len(template["gpus"])
        if known:
            ports = [(str(d), int(p), str(g), str(n)) for d, p, g, n in known["ports"]]
            uuids = [str(u) for u in known.get("gpus") or []]
        else:
            ports, uuids = [("mlx5_0", 1, _guid(index, 1), _guid(index, 0))], []
        uuids = (uuids + [_uuid(hostname, i) for i in range(len(uuids), gpus)])[:gpus]
        return cls(index, hostname, token, ports, uuids, template, agent_version,
                   pkeys={g: ["0xffff"] for _, _, g, _ in ports})

    # --- what the agent sends ---------------------------------------------------------------
    def enrol_request(self) -> protocol.EnrolRequest:
        sample = self.sample(0.0)
        gpu_keys = ("index", "uuid", "name", "pci_bus_id", "memory_total_bytes")
        port_keys = ("device", "port", "port_guid", "node_guid", "link_layer", "rate_gbps")
        return {"protocol": protocol.PROTOCOL_VERSION, "bootstrap_token": self.token,
                "role": "node", "hostname": self.hostname, "agent_version": self.agent_version,
                "inventory": {"host": sample["host"],
                              "gpus": [{k: g.get(k) for k in gpu_keys} for g in sample["gpus"]],
                              "ib_ports": [{k: p.get(k) for k in port_keys}
                                           for p in sample["ib_ports"]]}}

    def sample(self, now: float, drain: bool = True) -> dict[str, Any]:
        """One telemetry item as this node's (faulted) hardware reads; ``drain``: the
        injected XID events go out with it (once)."""
        t = self.template
        self.bytes_moved += 10**9
        port0 = t["ib_ports"][0]
        ports = [{**port0, "device": d, "port": p, "port_guid": g, "node_guid": _colon_guid(n),
                  "pkeys": list(self.pkeys.get(g, ["0xffff"])),
                  "xmit_bytes": self.bytes_moved, "rcv_bytes": self.bytes_moved,
                  "counters": {**port0["counters"], "port_xmit_data": self.bytes_moved // 4,
                               "port_rcv_data": self.bytes_moved // 4}}
                 for d, p, g, n in self.ports]
        gpus = [{**g, "uuid": self.gpu_uuids[i]} for i, g in enumerate(t["gpus"])]
        sample = {**t, "ts": round(now, 3), "host": {**t["host"], "hostname": self.hostname},
                  "gpus": gpus, "ib_ports": ports}
        return self.faults.decorate(sample, drain)

    def report(self, now: float) -> dict[str, Any]:
        self.seq += 1
        return {"protocol": protocol.PROTOCOL_VERSION, "node_id": self.node_id, "seq": self.seq,
                "created_at": datetime.fromtimestamp(now, UTC).isoformat(),
                "agent_version": self.agent_version, "dropped_reports": 0,
                "observed": self.observed(), "telemetry": [self.sample(now)]}

    def observed(self) -> dict[str, Any]:
        grants = self.desired.get("access_grants", [])
        return {"generation_applied": self.generation_applied,
                "generation_seen": self.generation_seen, "apply_errors": [],
                "partitions": check_partitions(self.devices(), self.desired),
                "ipoib_children": [],
                "access_grants": [{"account": g["account"], "lease_id": g["lease_id"],
                                   "state": "present"} for g in grants],
                **({"validation": self.validation} if self.validation else {})}

    def validate(self, request: dict[str, Any], now: float) -> None:
        """The agent's checks on what this node reports now (no dcgmi on a simulated
        node): passed unless an injected fault is still present."""
        if self.validation is not None and self.validation["id"] == request["id"]:
            return
        baseline = Baseline()
        baseline.observe(self.template)
        checks = hardware_checks(self.sample(now, drain=False), baseline)
        self.validation = result(request, [*checks, dict(NOT_INSTALLED)], now)

    def devices(self) -> list[IbDevice]:
        by_dev: dict[str, IbDevice] = {}
        for d, p, g, n in self.ports:
            dev = by_dev.setdefault(d, IbDevice(name=d, node_guid=n))
            dev.ports.append(IbPort(device=d, port=p, link_layer="InfiniBand", port_guid=g,
                                    pkeys=list(self.pkeys.get(g, ["0xffff"]))))
        return [replace(dev) for dev in by_dev.values()]

    # --- what the agent does with desired state ---------------------------------------------
    def apply(self, desired: dict[str, Any]) -> None:
        """Take the document (stale ones are ignored) and give each port exactly the keys
        it asks for, as the subnet manager would; echo the generation."""
        generation = int(desired["generation"])
        self.generation_seen = max(self.generation_seen, generation)
        if generation < self.generation_applied:
            return
        self.desired = desired
        if desired.get("validation"):
            self.validate(desired["validation"], time.time())
        for _, _, guid, _ in self.ports:
            keys = sorted(expected_pkeys(desired, guid))
            self.pkeys[guid] = ["0xffff", *(f"0x{k:04x}" for k in keys)]
        self.generation_applied = generation
