"""Profiles: a portal URL and an API key per name, in ``$XDG_CONFIG_HOME/gpupool/config.ini``
(``~/.config`` by default), mode 0600 in a 0700 directory. ``GPUPOOL_URL`` and
``GPUPOOL_API_KEY`` (and ``--url``/``--api-key``) override the profile's values."""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PROFILE = "default"


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpupool" / "config.ini"


@dataclass(frozen=True)
class Profile:
    name: str
    url: str
    api_key: str


def _read(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    if path.exists():
        parser.read(path, encoding="utf-8")
    return parser


def profile_load(name: str, path: Path | None = None) -> Profile:
    """The stored profile (empty values when there is none)."""
    parser = _read(path or config_path())
    section = parser[name] if parser.has_section(name) else {}
    return Profile(name=name, url=section.get("url", ""), api_key=section.get("api_key", ""))


def profile_save(profile: Profile, path: Path | None = None) -> Path:
    """Write (or replace) one profile; the file is created 0600 and kept 0600."""
    target = path or config_path()
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    parser = _read(target)
    parser[profile.name] = {"url": profile.url, "api_key": profile.api_key}
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.chmod(target, 0o600)  # an older file made with a looser mode
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        parser.write(out)
    return target
