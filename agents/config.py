"""TOML config (``tomllib``) with environment overrides.

``GPUPOOL_AGENT_<SECTION>_<KEY>=value`` overrides ``[section] key`` (e.g.
``GPUPOOL_AGENT_PORTAL_URL``, ``GPUPOOL_AGENT_PORTAL_BOOTSTRAP_TOKEN``); values are cast to
the type of the default.
"""

from __future__ import annotations

import copy
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ENV_PREFIX = "GPUPOOL_AGENT_"

NODE_DEFAULTS: dict[str, dict[str, Any]] = {
    "portal": {"url": "", "bootstrap_token": "", "ca_file": "", "timeout_s": 10.0},
    "agent": {
        "state_dir": "/var/lib/gpupool-agent", "sample_interval_s": 10.0,
        "report_interval_s": 10.0, "max_spooled_reports": 10_000, "long_poll_s": 30,
    },
    "hardware": {
        "sysfs_root": "/sys", "proc_root": "/proc", "fake_gpus": "", "fake_faults": "",
        "ipoib": "none", "ipoib_parent": "ib0", "access_root": "/",
        "dcgm_timeout_s": 1800.0,  # a validation's dcgmi diag (level 3 is ~15 min)
    },
    "metrics": {"listen": "0.0.0.0:9400"},
    "log": {"level": "INFO"},
}  # fmt: skip
FABRIC_DEFAULTS: dict[str, dict[str, Any]] = {
    "portal": dict(NODE_DEFAULTS["portal"]),
    "agent": {**NODE_DEFAULTS["agent"], "state_dir": "/var/lib/gpupool-fabric"},
    "hardware": {"sysfs_root": "/sys", "proc_root": "/proc"},
    "fabric": {
        "driver": "opensm", "partitions_conf": "/etc/opensm/partitions.conf",
        "opensm_pid_file": "/run/opensm.pid", "default_membership": "limited",
        "diag_prefix": "", "verify_timeout_s": 30.0, "read_back_parallel": 8,
        "ufm_url": "", "ufm_username": "", "ufm_password": "", "ufm_ca_file": "",
        # which UFM keys are ours: the portal's GPUPOOL_PKEY_RANGE and partition-name prefix
        "pkey_range": "0x0100-0x7ffe", "ufm_managed_prefix": "tenant_",
    },
    "metrics": {"listen": ""},
    "log": {"level": "INFO"},
}  # fmt: skip


class ConfigError(ValueError):
    pass


def _cast(default: Any, raw: str, name: str) -> Any:
    try:
        if isinstance(default, bool):
            return raw.strip().lower() in ("1", "true", "yes", "on")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}: {raw!r} is not a {type(default).__name__}") from exc
    return raw


def load(path: Path | None, defaults: dict[str, dict[str, Any]],
         env: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:  # fmt: skip
    cfg = copy.deepcopy(defaults)
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from exc
        for section, values in data.items():
            if section not in cfg or not isinstance(values, dict):
                raise ConfigError(f"{path}: unknown section [{section}]")
            for key, value in values.items():
                if key not in cfg[section]:
                    raise ConfigError(f"{path}: unknown key {section}.{key}")
                cfg[section][key] = value
    environ = os.environ if env is None else env
    for section, values in cfg.items():
        for key, default in values.items():
            name = f"{ENV_PREFIX}{section}_{key}".upper()
            if name in environ:
                values[key] = _cast(default, environ[name], name)
    return cfg
