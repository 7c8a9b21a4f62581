"""The fake NVML's MIG capability tree, written as the driver publishes it (issue 28): what
``agents.nvml.migcaps`` reads on a real node, under a temp proc root in tests.

Minors follow the driver's fixed table (``/proc/driver/nvidia-caps/mig-minors``):
``config`` 1, ``monitor`` 2, then per GPU 15 GPU instances × (1 access + 8 compute
instances) from 3 — ``gpu0/gi1/access`` is 12, ``gpu0/gi2/ci0/access`` 22,
``gpu1/gi0/access`` 138. Access files are mode 0444 (``DeviceFileMode: 292``), config 0400.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from agents.nvml.migcaps import CAPS_DEVICE_NAME, CAPS_DIR, ci_access, gi_access

GI_SLOTS = 15
CI_SLOTS = 8
FIRST_MINOR = 3
FAKE_CAPS_MAJOR = 237  # dynamic on a real host; any free major in the fake
DEVICES = f"Character devices:\n  1 mem\n195 nvidia\n{FAKE_CAPS_MAJOR} {CAPS_DEVICE_NAME}\n" \
          "508 nvidia-uvm\n\nBlock devices:\n  8 sd\n"


def minor_of(gpu: int, gi: int, ci: int | None = None) -> int:
    """The driver's minor of a GPU instance's (``ci`` None) or compute instance's access."""
    base = FIRST_MINOR + gpu * GI_SLOTS * (1 + CI_SLOTS) + gi * (1 + CI_SLOTS)
    return base if ci is None else base + 1 + ci


def _access(minor: int, mode: int = 0o444) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


def write_gpu(proc_root: Path, gpu: int, instances: Mapping[int, Sequence[int]] | None) -> None:
    """Publish GPU ``gpu``'s capability files: ``instances`` maps each GPU instance id to
    its compute instance ids; ``None`` (MIG mode off) removes the GPU's tree."""
    caps = proc_root / CAPS_DIR
    if not (proc_root / "devices").exists():
        proc_root.mkdir(parents=True, exist_ok=True)
        (proc_root / "devices").write_text(DEVICES)
    (caps / "mig").mkdir(parents=True, exist_ok=True)
    (caps / "mig/config").write_text(_access(1, 0o400))
    (caps / "mig/monitor").write_text(_access(2))
    shutil.rmtree(caps / f"gpu{gpu}", ignore_errors=True)
    for gi, cis in sorted((instances or {}).items()):
        (caps / gi_access(gpu, gi)).parent.mkdir(parents=True, exist_ok=True)
        (caps / gi_access(gpu, gi)).write_text(_access(minor_of(gpu, gi)))
        for ci in cis:
            (caps / ci_access(gpu, gi, ci)).parent.mkdir(parents=True, exist_ok=True)
            (caps / ci_access(gpu, gi, ci)).write_text(_access(minor_of(gpu, gi, ci)))
    if instances is not None:
        (caps / f"gpu{gpu}/mig").mkdir(parents=True, exist_ok=True)
