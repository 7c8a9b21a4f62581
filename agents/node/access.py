"""Per-lease access grant on a node: a lease account with the tenant members' SSH keys,
limited to the lease's GPUs; removed (with the account's processes) when the lease ends.

The real implementation edits files under an injectable root (``/`` in production, a temp
directory in tests): ``etc/passwd``, ``etc/group``, ``etc/shadow`` (locked password: key
login only), ``home/<account>/.ssh/authorized_keys``, ``etc/gpupool/leases/<account>.env``
(``CUDA_VISIBLE_DEVICES``/``NVIDIA_VISIBLE_DEVICES``, sourced by
``etc/profile.d/gpupool-lease.sh``), ``etc/gpupool/leases/<account>.devices`` (device
cgroup allow-list) and a systemd drop-in ``user-<uid>.slice.d/50-gpupool.conf``
(``DevicePolicy=closed`` + ``DeviceAllow=``) that enforces it for every login session.

A MIG grant (issue 28) also allows exactly its instances' GPU-instance and
compute-instance capability nodes (``/dev/nvidia-caps/nvidia-capN``, read-only, as the
driver publishes them: ``agents.nvml.migcaps``) and no other ``nvidia-cap``: the parent
``/dev/nvidiaN`` alone opens no MIG device, so another tenant's instances on the same GPU
stay out of reach. The ``.devices`` list names them by major:minor (``c 237:12 r``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from agents.client.spool import atomic_write
from agents.host import HostCommands, host_for_root
from agents.nvml.migcaps import CapDevice
from agents.protocol import ENV_NAME_RE, ENV_VALUE_RE

MARKER = "gpupool-lease"
UID_RANGE = range(61000, 65000)
NVIDIA_MAJOR = 195
PROFILE_SCRIPT = """# managed by gpupool agent: per-lease GPU environment
if [ -r "/etc/gpupool/leases/$(id -un).env" ]; then
    . "/etc/gpupool/leases/$(id -un).env"
fi
"""


@dataclass(frozen=True)
class Grant:
    lease_id: str
    account: str
    ssh_authorized_keys: tuple[str, ...]
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str, ...] = ()
    not_after: float | None = None  # epoch seconds; the agent removes the grant then
    # extra variables for the account (NCCL_IB_HCA, UCX_NET_DEVICES, …), shell-safe only
    environment: tuple[tuple[str, str], ...] = ()
    # the MIG instances' capability nodes (set by the agent from its own instances, never
    # from the wire: the portal names instances, the driver names their nodes)
    mig_caps: tuple[CapDevice, ...] = ()

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Grant:
        env = d.get("environment") or {}
        return cls(
            lease_id=d["lease_id"], account=d["account"],
            ssh_authorized_keys=tuple(d.get("ssh_authorized_keys", [])),
            gpu_indices=tuple(d.get("gpu_indices", [])), gpu_uuids=tuple(d.get("gpu_uuids", [])),
            not_after=parse_not_after(d.get("not_after")),
            environment=tuple(sorted((str(k), str(v)) for k, v in env.items()
                                     if ENV_NAME_RE.match(str(k)) and ENV_VALUE_RE.match(str(v)))),
        )  # fmt: skip

    def expired(self, now: float) -> bool:
        return self.not_after is not None and now >= self.not_after


def parse_not_after(value: Any) -> float | None:
    """ISO-8601 UTC (``2026-12-01T10:00:00Z`` or ``+00:00``) -> epoch seconds."""
    if value is None:
        return None
    when = datetime.fromisoformat(str(value))
    if when.tzinfo is None:
        raise ValueError(f"not_after {value!r} has no timezone")
    return when.timestamp()


class AccessManager(Protocol):
    def present(self) -> dict[str, str]: ...  # account -> lease_id
    def apply(self, grant: Grant) -> None: ...
    def revoke(self, account: str) -> None: ...


@dataclass
class FakeAccess:
    grants: dict[str, Grant] = field(default_factory=dict)
    revoked: list[str] = field(default_factory=list)

    def present(self) -> dict[str, str]:
        return {a: g.lease_id for a, g in self.grants.items()}

    def apply(self, grant: Grant) -> None:
        self.grants[grant.account] = grant

    def revoke(self, account: str) -> None:
        self.grants.pop(account, None)
        self.revoked.append(account)

    def gpu_indices(self, account: str) -> list[int]:
        grant = self.grants.get(account)
        return list(grant.gpu_indices) if grant else []

    def cap_minors(self, account: str) -> list[int]:
        grant = self.grants.get(account)
        return sorted(c.minor for c in grant.mig_caps) if grant else []


def terminate_user(host: HostCommands, account: str) -> None:
    """End the account's sessions and processes (exit codes ignored: none may be left)."""
    host.run(["loginctl", "terminate-user", account])
    host.run(["pkill", "-KILL", "-u", account])


class FileAccess:
    """``host``: where ``loginctl``/``pkill`` run; by default the real host only for the
    real root ``/`` and a recording fake for any other root (tests, demo)."""

    def __init__(self, root: Path | str = "/", chown: bool | None = None,
                 terminate: Callable[[str], None] | None = None,
                 host: HostCommands | None = None) -> None:  # fmt: skip
        self.root = Path(root)
        self.chown = (os.geteuid() == 0 and str(root) == "/") if chown is None else chown
        self.host = host if host is not None else host_for_root(self.root)
        self.terminate = terminate or (lambda account: terminate_user(self.host, account))

    def _p(self, rel: str) -> Path:
        return self.root / rel

    def _lines(self, rel: str) -> list[str]:
        try:
            return self._p(rel).read_text().splitlines()
        except FileNotFoundError:
            return []

    def _write_lines(self, rel: str, lines: list[str], mode: int) -> None:
        self._p(rel).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self._p(rel), "".join(line + "\n" for line in lines), mode)

    def present(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in self._lines("etc/passwd"):
            f = line.split(":")
            if len(f) >= 5 and f[4].startswith(MARKER + " "):
                out[f[0]] = f[4].split(" ", 1)[1]
        return out

    def _uid(self, account: str) -> int:
        used: dict[str, int] = {}
        for line in self._lines("etc/passwd"):
            f = line.split(":")
            if len(f) >= 3 and f[2].isdigit():
                used[f[0]] = int(f[2])
        if account in used:
            return used[account]
        taken = set(used.values())
        return next(u for u in UID_RANGE if u not in taken)

    def apply(self, grant: Grant) -> None:
        uid = self._uid(grant.account)
        home = f"/home/{grant.account}"
        self._upsert("etc/passwd", grant.account,
                     f"{grant.account}:x:{uid}:{uid}:{MARKER} {grant.lease_id}:{home}:/bin/bash",
                     0o644)  # fmt: skip
        self._upsert("etc/group", grant.account, f"{grant.account}:x:{uid}:", 0o644)
        self._upsert("etc/shadow", grant.account, f"{grant.account}:!:19000:0:99999:7:::", 0o640)
        self._ssh(grant, uid)
        self._env(grant)
        self._devices(grant, uid)

    def _upsert(self, rel: str, account: str, entry: str, mode: int) -> None:
        lines = [ln for ln in self._lines(rel) if ln.split(":")[0] != account]
        self._write_lines(rel, [*lines, entry], mode)

    def _ssh(self, grant: Grant, uid: int) -> None:
        ssh = self._p(f"home/{grant.account}/.ssh")
        ssh.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(ssh.parent, 0o700)
        os.chmod(ssh, 0o700)
        keys = ssh / "authorized_keys"
        atomic_write(keys, "".join(k.strip() + "\n" for k in grant.ssh_authorized_keys), 0o600)
        if self.chown:
            for path in (ssh.parent, ssh, keys):
                os.chown(path, uid, uid)

    def _env(self, grant: Grant) -> None:
        visible = ",".join(grant.gpu_uuids) if grant.gpu_uuids else ",".join(
            str(i) for i in grant.gpu_indices)  # fmt: skip
        text = (
            f"# gpupool lease {grant.lease_id}\n"
            f"export CUDA_VISIBLE_DEVICES={visible}\n"
            f"export NVIDIA_VISIBLE_DEVICES={visible}\n"
            f"export GPUPOOL_LEASE_ID={grant.lease_id}\n"
        ) + "".join(f"export {name}={value}\n" for name, value in grant.environment)
        leases = self._p("etc/gpupool/leases")
        leases.mkdir(parents=True, exist_ok=True)
        atomic_write(leases / f"{grant.account}.env", text, 0o644)
        profile = self._p("etc/profile.d/gpupool-lease.sh")
        profile.parent.mkdir(parents=True, exist_ok=True)
        if not profile.exists():
            atomic_write(profile, PROFILE_SCRIPT, 0o644)

    def _devices(self, grant: Grant, uid: int) -> None:
        nodes = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] + [
            f"/dev/nvidia{i}" for i in sorted(grant.gpu_indices)
        ]
        caps = sorted(set(grant.mig_caps), key=lambda c: c.minor)
        allow = [f"c {NVIDIA_MAJOR}:{i} rw" for i in sorted(grant.gpu_indices)]
        allow.append(f"c {NVIDIA_MAJOR}:255 rw")  # nvidiactl
        allow += [f"c {c.major}:{c.minor} r" for c in caps]
        atomic_write(self._p(f"etc/gpupool/leases/{grant.account}.devices"),
                     "".join(a + "\n" for a in allow), 0o644)  # fmt: skip
        dropin = self._p(f"etc/systemd/system/user-{uid}.slice.d/50-gpupool.conf")
        dropin.parent.mkdir(parents=True, exist_ok=True)
        body = "[Slice]\nDevicePolicy=closed\n" + "".join(f"DeviceAllow={n} rw\n" for n in nodes)
        body += "".join(f"DeviceAllow={c.path} r\n" for c in caps)
        atomic_write(dropin, f"# gpupool lease {grant.lease_id}\n" + body, 0o644)

    def _allowed(self, account: str) -> list[tuple[int, int]]:
        """(major, minor) of each char device in the account's allow-list."""
        out: list[tuple[int, int]] = []
        for line in self._lines(f"etc/gpupool/leases/{account}.devices"):
            major, _, minor = [*line.split(), "", ""][1].partition(":")
            if major.isdigit() and minor.isdigit():
                out.append((int(major), int(minor)))
        return out

    def gpu_indices(self, account: str) -> list[int]:
        """The GPUs the account was given, from its device allow-list (``c 195:N rw``)."""
        return [minor for major, minor in self._allowed(account)
                if major == NVIDIA_MAJOR and minor != 255]

    def cap_minors(self, account: str) -> list[int]:
        """The ``nvidia-cap`` minors the account was given (every other major)."""
        return sorted(minor for major, minor in self._allowed(account) if major != NVIDIA_MAJOR)

    def revoke(self, account: str) -> None:
        if account not in self.present():
            return  # never touch accounts the agent did not create
        uid = self._uid(account)
        self.terminate(account)
        for rel in ("etc/passwd", "etc/group", "etc/shadow"):
            lines = self._lines(rel)
            kept = [ln for ln in lines if ln.split(":")[0] != account]
            if kept != lines:
                self._write_lines(rel, kept, 0o640 if rel == "etc/shadow" else 0o644)
        shutil.rmtree(self._p(f"home/{account}"), ignore_errors=True)
        for rel in (f"etc/gpupool/leases/{account}.env", f"etc/gpupool/leases/{account}.devices"):
            self._p(rel).unlink(missing_ok=True)
        shutil.rmtree(self._p(f"etc/systemd/system/user-{uid}.slice.d"), ignore_errors=True)
