"""The node's MIG layout from desired state, applied with ``agents.nvml.mig.reconcile``
(ADR 0210, 0222), and the instances reported back with their ``MIG-…`` UUIDs.

Desired state ``mig``: ``[{"gpu_index": 0, "instances": [{"profile", "start"}]}]`` for each
GPU the portal manages; a GPU not listed is left alone. An instance whose grant is torn
down is cleaned on its own (``agents.nvml.migclean``: its processes ended, destroyed and
made again, verified) — never the whole GPU, whose other instances belong to other
tenants — before the next reconcile destroys it (no longer desired).

A grant reaches its instances through their capability nodes (``access_for``: the GPU
instance's and compute instance's ``nvidia-cap`` read from the driver's proc files, each
node made with ``nvidia-modprobe -f`` as the driver's tools make them), never another's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from agents.host import HostCommands
from agents.nvml import binding, mig, migclean
from agents.nvml.migcaps import CapDevice, MigCapabilities

log = logging.getLogger("agents.node.migapply")

Layout = dict[int, list[tuple[str, int]]]
Device = tuple[int, str, int]  # (gpu index, profile, start)


def layout_from_wire(entries: Any) -> Layout:
    """The desired layout per GPU; malformed entries are skipped (validated upstream)."""
    out: Layout = {}
    for gpu in entries if isinstance(entries, list) else []:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("gpu_index"), int):
            continue
        out[gpu["gpu_index"]] = [(str(i["profile"]), int(i["start"]))
                                 for i in gpu.get("instances") or []
                                 if isinstance(i, dict) and isinstance(i.get("start"), int)]
    return out


def devices_from_wire(grant: dict[str, Any]) -> tuple[Device, ...]:
    """A grant's MIG devices (``mig_devices``), in wire order."""
    out: list[Device] = []
    for d in grant.get("mig_devices") or []:
        if isinstance(d, dict) and isinstance(d.get("gpu_index"), int) \
                and isinstance(d.get("start"), int):
            out.append((d["gpu_index"], str(d.get("profile")), d["start"]))
    return tuple(out)


class MigApplier:
    """Keeps each managed GPU at its desired MIG layout through NVML (the fake in tests)."""

    def __init__(self, api: Any, host: HostCommands | None = None,
                 sleep: Callable[[float], None] | None = None,
                 caps: MigCapabilities | None = None) -> None:
        self.api, self.host, self.sleep, self.caps = api, host, sleep, caps
        self.desired: Layout = {}
        self.results: dict[int, mig.MigResult] = {}

    def apply(self, layout: Layout) -> list[dict[str, str]]:
        """Reconcile every GPU of ``layout``; apply errors (a pending reset counts)."""
        self.desired = layout
        errors: list[dict[str, str]] = []
        for index, wanted in sorted(layout.items()):
            result = mig.reconcile(self.api, index, wanted)
            if not wanted and result.mode == "enabled" and not result.instances:
                result.mode = self._whole_again(index)
            self.results[index] = result
            for text in result.errors:
                errors.append({"item": f"mig/{index}", "message": text})
            if result.mode not in ("enabled", "disabled"):
                errors.append({"item": f"mig/{index}", "message": f"MIG mode {result.mode}"})
        for index in set(self.results) - set(layout):
            del self.results[index]
        return errors

    def _whole_again(self, index: int) -> str:
        """A managed GPU left with no instances goes back to whole use (MIG mode off), so a
        whole-GPU lease the portal may place there sees a GPU (ADR 0222); ``disabled``,
        or ``pending_reset`` when the change waits for a GPU reset."""
        handle = self.api.nvmlDeviceGetHandleByIndex(index)
        disable = int(self.api.NVML_DEVICE_MIG_DISABLE)
        status = int(self.api.nvmlDeviceSetMigMode(handle, disable))
        current = int(self.api.nvmlDeviceGetMigMode(handle)[0])
        return "disabled" if status == 0 and current == disable else "pending_reset"

    def converged(self) -> bool:
        """Every managed GPU holds exactly its desired instances."""
        for index, wanted in self.desired.items():
            result = self.results.get(index)
            if result is None:
                return False
            have = sorted(i.key for i in result.instances)
            if have != sorted(wanted) or (wanted and result.mode != "enabled"):
                return False
        return True

    def instances_of(self, devices: tuple[Device, ...]) -> list[mig.MigInstance] | None:
        """The made instances (UUID and compute instance known) of ``devices``, in order;
        ``None`` while any of them is not made yet."""
        made = {(r.gpu_index, i.profile, i.start): i for r in self.results.values()
                for i in r.instances if i.uuid and i.compute_instance_id is not None}
        if not all(d in made for d in devices):
            return None
        return [made[d] for d in devices]

    def access_for(self, instances: list[mig.MigInstance]) -> tuple[CapDevice, ...]:
        """The capability nodes that reach exactly ``instances`` (``CapsUnreadable`` when
        the driver's files are not there); none when this applier reads no capabilities."""
        if self.caps is None:
            return ()
        out: list[CapDevice] = []
        for inst in instances:
            assert inst.compute_instance_id is not None  # instances_of gives made ones only
            out += self.caps.instance(inst.gpu_index, inst.gpu_instance_id,
                                      inst.compute_instance_id)
        for cap in out:
            self._make_node(cap)
        return tuple(out)

    def _make_node(self, cap: CapDevice) -> None:
        if self.host is None:
            return
        done = self.host.run(["nvidia-modprobe", "-f", cap.proc_path])
        if done.returncode != 0:
            log.warning("nvidia-modprobe could not make a capability node",
                        extra={"node": cap.path, "error": done.stderr.strip()})

    def clean(self, devices: tuple[Device, ...]) -> list[dict[str, Any]]:
        """Clean the instances a torn-down grant held (each on its own)."""
        out: list[dict[str, Any]] = []
        if self.host is None:
            return out
        for index, profile, start in devices:
            result = self.results.get(index)
            inst = next((i for i in (result.instances if result else [])
                         if i.key == (profile, start)), None)
            if inst is None:
                continue
            kwargs: dict[str, Any] = {} if self.sleep is None else {"sleep": self.sleep}
            done = migclean.clean_instance(self.api, self.host, index, inst.gpu_instance_id,
                                           **kwargs)
            log.info("MIG instance cleaned" if done["clean"] else "MIG instance NOT clean",
                     extra={"gpu_index": index, "profile": profile, "start": start})
            out.append(done)
        return out

    def sample_instances(self) -> list[mig.MigInstance]:
        """The instances of each managed GPU in MIG mode, read afresh (memory use now, for
        ``/metrics``); the last reconcile's when NVML cannot be read."""
        out: list[mig.MigInstance] = []
        for index, result in sorted(self.results.items()):
            if result.mode != "enabled":
                continue
            try:
                handle = self.api.nvmlDeviceGetHandleByIndex(index)
                out += mig.list_instances(self.api, handle, index)
            except binding.NVMLError:
                out += result.instances
        return out

    def observed(self) -> list[dict[str, Any]]:
        """Per managed GPU: its mode, errors and instances (with their UUIDs)."""
        return [{"gpu_index": index, "mode": r.mode, "errors": list(r.errors),
                 "instances": [_instance(i) for i in sorted(r.instances, key=lambda i: i.start)]}
                for index, r in sorted(self.results.items())]


def _instance(inst: mig.MigInstance) -> dict[str, Any]:
    return {"profile": inst.profile, "start": inst.start, "size": inst.size,
            "gpu_instance_id": inst.gpu_instance_id,
            "compute_instance_id": inst.compute_instance_id, "uuid": inst.uuid or "",
            "busy": inst.busy}
