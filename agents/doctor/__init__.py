"""``gpupool-agent doctor``: checks a host and says what is wrong, in words.

Each check returns :class:`Finding` rows (``ok``/``warn``/``fail``, what was found, what to
do). Exit status 0 when nothing failed, 1 otherwise (warnings do not fail the host).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agents.doctor.findings import FAIL, OK, WARN, Finding
from agents.doctor.hostchecks import (
    check_accounts,
    check_config_file,
    check_credential,
    check_fabric,
    check_gpus,
    check_infiniband,
    check_state_dir,
)
from agents.doctor.portalchecks import check_portal

__all__ = ["FAIL", "OK", "WARN", "Finding", "exit_code", "render", "run_checks"]


def run_checks(cfg: dict[str, dict[str, Any]], config_path: Path | None, role: str, *,
               nvml_api: Any = None, now: Callable[[], float] | None = None,
               ) -> list[Finding]:  # fmt: skip
    """Every check for ``role`` (``node`` or ``fabric``); ``nvml_api`` replaces the real or
    fake NVML the config names (tests)."""
    hw, agent, portal = cfg["hardware"], cfg["agent"], cfg["portal"]
    state_dir = Path(agent["state_dir"])
    found: list[Finding] = []
    if role == "node":
        found += check_gpus(hw.get("fake_gpus", ""), nvml_api)
    found += check_infiniband(Path(hw["sysfs_root"]))
    found += check_portal(portal["url"], ca_file=portal["ca_file"],
                          timeout_s=float(portal["timeout_s"]), now=now)  # fmt: skip
    found += check_state_dir(state_dir)
    found += check_config_file(config_path, portal)
    found += check_credential(state_dir, portal["bootstrap_token"])
    if role == "node":
        found += check_accounts(Path(hw["access_root"]))
    else:
        found += check_fabric(cfg["fabric"])
    return found


def exit_code(found: Sequence[Finding]) -> int:
    return 1 if any(f.status == FAIL for f in found) else 0


def render(found: Sequence[Finding], fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps({"healthy": exit_code(found) == 0,
                           "findings": [asdict(f) for f in found]}, indent=2) + "\n"  # fmt: skip
    lines = []
    for f in found:
        lines.append(f"[{f.status.upper():4}] {f.check}: {f.message}")
        if f.fix and f.status != OK:
            lines.append(f"       what to do: {f.fix}")
    problems = sum(f.status == FAIL for f in found)
    lines.append("healthy" if not problems else f"{problems} problem(s) found")
    return "\n".join(lines) + "\n"
