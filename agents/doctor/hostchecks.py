"""Host-side doctor checks: NVML and GPUs, InfiniBand ports, the state directory, the
config file's mode, the credential, lease-account management and the fabric driver."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tomllib
import uuid
from pathlib import Path
from typing import Any

from agents.doctor.findings import Finding, fail, ok, warn
from agents.nvml import binding
from agents.nvml.fake import FakeNvml

ACTIVE = "ACTIVE"
# what FileAccess writes under access_root (agents/node/access.py)
ACCOUNT_PATHS = ("etc/passwd", "etc/group", "etc/shadow", "home", "etc/systemd/system")


def check_gpus(fake_gpus: str, api: Any = None) -> list[Finding]:
    if api is None:
        api = FakeNvml(fake_gpus) if fake_gpus else binding.real_api()
    try:
        api.nvmlInit()
    except Exception as exc:  # NVMLError, or the shared library not loading at all
        return [fail("nvml", f"NVML did not load: {exc}",
                     "install or load the NVIDIA driver (`nvidia-smi` must work); a host "
                     "without GPUs should run the fabric role")]  # fmt: skip
    try:
        count, driver = int(api.nvmlDeviceGetCount()), api.nvmlSystemGetDriverVersion()
    except Exception as exc:
        return [fail("nvml", f"NVML loaded but cannot list GPUs: {exc}",
                     "check `nvidia-smi -L` and the kernel log (dmesg) for Xid errors")]
    finally:
        with contextlib.suppress(Exception):
            api.nvmlShutdown()
    found = [ok("nvml", f"NVML loaded (driver {driver!s})")]
    if count == 0:
        found.append(fail("gpus", "NVML loaded but sees no GPU",
                          "check `nvidia-smi -L`; are the GPUs bound to vfio or absent?"))
    else:
        found.append(ok("gpus", f"{count} GPU(s) visible"))
    return found


def _port_states(base: Path) -> dict[str, str]:
    states: dict[str, str] = {}
    for dev in sorted(os.listdir(base)):
        with contextlib.suppress(OSError):
            for port in sorted(os.listdir(base / dev / "ports")):
                text = (base / dev / "ports" / port / "state").read_text().strip()
                states[f"{dev}/{port}"] = text.partition(":")[2].strip() or text
    return states


def check_infiniband(sysfs_root: Path) -> list[Finding]:
    base = sysfs_root / "class" / "infiniband"
    if not sysfs_root.is_dir():
        return [fail("infiniband", f"sysfs root {sysfs_root} does not exist",
                     "set hardware.sysfs_root to /sys (or the directory playing it)")]
    states = _port_states(base) if base.is_dir() else {}
    if not states:
        return [fail("infiniband", f"no InfiniBand port under {base}",
                     "load the HCA driver (mlx5_ib from rdma-core) and check `ibstat`")]
    down = {name: s for name, s in states.items() if s != ACTIVE}
    if down:
        listed = ", ".join(f"{n} is {s}" for n, s in down.items())
        return [warn("infiniband", f"{len(states)} port(s); not active: {listed}",
                     "check the cable and that a subnet manager answers (`sminfo`)")]
    return [ok("infiniband", f"{len(states)} port(s), all ACTIVE")]


def _probe_write(directory: Path) -> str | None:
    """None when a file can be created and removed in ``directory``, else why not."""
    probe = directory / f".doctor-{uuid.uuid4().hex}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def check_state_dir(state_dir: Path) -> list[Finding]:
    fix = (f"create it writable by the agent's user (`install -d -m 0700 {state_dir}`); "
           "the systemd unit's StateDirectory= does this")  # fmt: skip
    if state_dir.exists() and not state_dir.is_dir():
        return [fail("state_dir", f"{state_dir} exists but is not a directory", fix)]
    if not state_dir.exists():
        parent = next(p for p in state_dir.parents if p.exists())
        why = _probe_write(parent) if parent.is_dir() else "not a directory"
        if why is None:
            return [warn("state_dir", f"{state_dir} does not exist yet (the agent creates it)",
                         fix)]  # fmt: skip
        return [fail("state_dir", f"{state_dir} does not exist and cannot be created "
                     f"under {parent}: {why}", fix)]  # fmt: skip
    why = _probe_write(state_dir)
    if why is not None:
        return [fail("state_dir", f"{state_dir} is not writable by uid {os.geteuid()}: {why}",
                     fix)]  # fmt: skip
    return [ok("state_dir", f"{state_dir} is writable")]


def _secrets_in(path: Path) -> list[str]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return []
    keys = [("portal", "bootstrap_token"), ("fabric", "ufm_password")]
    return [f"{s}.{k}" for s, k in keys if str(data.get(s, {}).get(k, "")).strip()]


def check_config_file(path: Path | None, portal: dict[str, Any]) -> list[Finding]:
    if path is None:
        return [warn("config", "no config file given: defaults and GPUPOOL_AGENT_* only",
                     "pass --config /etc/gpupool/agent.toml")]  # fmt: skip
    if not os.access(path, os.R_OK):
        return [fail("config", f"{path} is not readable by uid {os.geteuid()}",
                     f"`chown root {path} && chmod 0600 {path}` (the agent runs as root)")]
    secrets = _secrets_in(path)
    mode = stat.S_IMODE(path.stat().st_mode)
    if secrets and mode & stat.S_IROTH:
        return [fail("config", f"{path} holds {', '.join(secrets)} and is world-readable "
                     f"(mode {mode:04o})", f"`chmod 0600 {path}` (or move the token to the "
                     "unit's EnvironmentFile, mode 0600)")]  # fmt: skip
    return [ok("config", f"{path} is readable (mode {mode:04o})")]


def check_credential(state_dir: Path, bootstrap_token: str) -> list[Finding]:
    cred = state_dir / "credential.json"
    enrol = ("issue a bootstrap token in the portal (fleet: enrol a node) and set "
             "GPUPOOL_AGENT_PORTAL_BOOTSTRAP_TOKEN or portal.bootstrap_token")  # fmt: skip
    try:
        data = json.loads(cred.read_text())
        node_id, secret = data["node_id"], data["credential"]
    except FileNotFoundError:
        if bootstrap_token:
            return [ok("credential", "not enrolled yet; will enrol with the bootstrap token")]
        return [fail("credential", "not enrolled and no bootstrap token configured", enrol)]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [fail("credential", f"{cred} is unreadable or damaged ({exc})",
                     f"remove {cred} and enrol again with a fresh bootstrap token")]
    if not secret:
        return [fail("credential", f"{cred} holds an empty credential", enrol)]
    if stat.S_IMODE(cred.stat().st_mode) & 0o077:
        return [warn("credential", f"enrolled as node {node_id}, but {cred} is readable by "
                     "others", f"`chmod 0600 {cred}`")]  # fmt: skip
    return [ok("credential", f"enrolled as node {node_id}")]


def check_accounts(access_root: Path) -> list[Finding]:
    """Lease accounts are files the agent edits (passwd/group/shadow, home, a slice drop-in)
    and sessions it ends (loginctl, pkill): each must be writable / present."""
    if not access_root.is_dir():
        return [fail("accounts", f"access_root {access_root} does not exist",
                     "set hardware.access_root to / (or a test directory)")]  # fmt: skip
    blocked = [rel for rel in ACCOUNT_PATHS if (access_root / rel).exists()
               and not os.access(access_root / rel, os.W_OK)]  # fmt: skip
    if blocked:
        return [fail("accounts", "cannot manage lease accounts: not writable: "
                     + ", ".join(str(access_root / r) for r in blocked),
                     "run the agent as root with the unit's ReadWritePaths= (/etc, /home) "
                     "and CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER")]  # fmt: skip
    missing = [t for t in ("loginctl", "pkill") if shutil.which(t) is None]
    if str(access_root) == "/" and missing:
        return [fail("accounts", f"{', '.join(missing)} not found on PATH: a lease's sessions "
                     "could not be ended", "install systemd and procps")]  # fmt: skip
    return [ok("accounts", f"lease accounts can be managed under {access_root}")]


def check_fabric(f: dict[str, Any]) -> list[Finding]:
    if f["driver"] != "opensm":
        return [ok("fabric", f"driver {f['driver']}")]
    conf = Path(f["partitions_conf"])
    target = conf if conf.exists() else conf.parent
    if not os.access(target, os.W_OK):
        return [fail("fabric", f"{target} is not writable: the partition map cannot be "
                     "written", "run the fabric agent as root with ReadWritePaths=/etc/opensm")]
    if not Path(f["opensm_pid_file"]).exists():
        return [warn("fabric", f"no {f['opensm_pid_file']}: OpenSM does not seem to run (it "
                     "cannot be told to re-read partitions.conf)",
                     "`systemctl enable --now opensm`")]  # fmt: skip
    return [ok("fabric", f"{conf} writable, OpenSM running")]
