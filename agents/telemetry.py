"""One node sample = host + GPUs + InfiniBand ports (+ rates and XID events), and the
sampler that runs the collectors. ``to_wire`` gives the protocol's ``telemetry`` item."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.host import HostCollector, HostSample
from agents.nvml.collector import GpuSystemSample, NvmlCollector
from agents.nvml.xid import XidEvent
from agents.sysfs.infiniband import IbDevice, InfinibandCollector
from agents.sysfs.rates import PortRates, RateTracker


@dataclass
class NodeSample:
    ts: float
    host: HostSample
    gpus: GpuSystemSample
    ib: list[IbDevice]
    ib_rates: dict[tuple[str, int], PortRates] = field(default_factory=dict)
    xid_events: list[XidEvent] = field(default_factory=list)


class Sampler:
    def __init__(
        self,
        host: HostCollector,
        ib: InfinibandCollector,
        nvml: NvmlCollector | None,
        nvml_error: str | None = None,
        xid_source: Callable[[], list[XidEvent]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.host, self.ib, self.nvml = host, ib, nvml
        self.nvml_error = nvml_error
        self.xid_source = xid_source
        self.clock = clock
        self.rates = RateTracker()
        self.before_sample: Callable[[], object] | None = None  # e.g. a fault file's poll

    def snapshot(self) -> NodeSample:
        """A fresh read for another thread (a validation run): no rates, no XID events
        drained, nothing of the regular samples' state touched."""
        gpus = self.nvml.collect() if self.nvml is not None else GpuSystemSample(
            available=False, error=self.nvml_error or "NVML not loaded")
        return NodeSample(ts=self.clock(), host=self.host.collect(), gpus=gpus,
                          ib=self.ib.collect())

    def sample(self) -> NodeSample:
        if self.before_sample is not None:
            self.before_sample()
        ts = self.clock()
        devices = self.ib.collect()
        if self.nvml is not None:
            gpus = self.nvml.collect()
        else:
            gpus = GpuSystemSample(available=False, error=self.nvml_error or "NVML not loaded")
        return NodeSample(
            ts=ts,
            host=self.host.collect(),
            gpus=gpus,
            ib=devices,
            ib_rates=self.rates.update(devices, ts),
            xid_events=self.xid_source() if self.xid_source else [],
        )


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def to_wire(s: NodeSample) -> dict[str, Any]:
    """Telemetry item of protocol v1 (see docs/agent-protocol.md). Absent = not reported."""
    return {
        "ts": round(s.ts, 3),
        "host": _drop_none(dict(vars(s.host))),
        "gpu_system": _drop_none(
            {
                "available": s.gpus.available,
                "error": s.gpus.error,
                "driver_version": s.gpus.driver_version,
                "nvml_version": s.gpus.nvml_version,
            }
        ),
        "gpus": [_drop_none(dict(vars(g))) for g in s.gpus.gpus],
        "ib_ports": [_port_wire(d, p, s) for d in s.ib for p in d.ports],
        "xid_events": [
            {"gpu_uuid": e.gpu_uuid, "xid": e.xid, "ts": e.ts} for e in s.xid_events
        ],
    }


def _port_wire(dev: IbDevice, port: Any, s: NodeSample) -> dict[str, Any]:
    rates = s.ib_rates.get((dev.name, port.port))
    out = _drop_none(
        {
            "device": dev.name,
            "port": port.port,
            "node_guid": dev.node_guid,
            "fw_ver": dev.fw_ver,
            "hca_type": dev.hca_type,
            "state": port.state,
            "state_id": port.state_id,
            "phys_state": port.phys_state,
            "phys_state_id": port.phys_state_id,
            "rate_gbps": port.rate_gbps,
            "link_layer": port.link_layer,
            "lid": port.lid,
            "port_guid": port.port_guid,
            "pkeys": port.pkeys,
            "xmit_bytes": port.data_bytes("port_xmit_data"),
            "rcv_bytes": port.data_bytes("port_rcv_data"),
        }
    )
    out["counters_64bit"] = port.extended
    out["counters"] = dict(port.counters)
    out["saturated"] = port.saturated
    out["unavailable"] = dict(port.unavailable)
    if port.counters_ext:
        out["counters_ext"] = dict(port.counters_ext)
    if port.hw_counters:
        out["hw_counters"] = dict(port.hw_counters)
    if rates is not None:
        out["rates_per_s"] = {k: round(v, 3) for k, v in rates.per_second.items()}
        out["rates_unknown"] = dict(rates.unknown)
    return out
