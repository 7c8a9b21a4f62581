"""Fixed MIG layouts from NVIDIA mig-parted's config format (ADR 0238).

A mig-parted file (``version: v1``) names configs under ``mig-configs``; each config is a
list of entries ``{devices: all | [0, 1, ...], mig-enabled: bool, mig-devices: {profile:
count}}`` (later entries win for a device both name, as mig-parted applies them in order).
This module checks the already loaded document (the caller parses the YAML) against the
MIG tables of ``scheduler.mig`` and packs each GPU's counts into a deterministic layout:
every instance at a valid start slot, on free slices, within the profile's instance and
the GPU's compute limits. Errors name the field (``mig-configs.<name>[i].mig-devices``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.mig import Instance, MigModel, MigProfile, can_add, model_for

VERSION = "v1"
ENTRY_KEYS = frozenset({"devices", "mig-enabled", "mig-devices"})


class LayoutError(ValueError):
    """A bad mig-parted document; ``field`` is where (dotted, mig-parted's own keys)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True)
class Entry:
    """One entry of a config: which devices (None: all), MIG on or off, the counts."""

    devices: tuple[int, ...] | None
    enabled: bool
    counts: tuple[tuple[str, int], ...]

    def covers(self, index: int) -> bool:
        return self.devices is None or index in self.devices


@dataclass(frozen=True)
class FixedLayout:
    """One GPU's fixed layout: MIG off (a whole GPU), or MIG on with these instances."""

    enabled: bool
    instances: tuple[Instance, ...] = ()

    def as_wire(self) -> dict[str, Any]:
        return {"mig-enabled": self.enabled,
                "instances": [[name, start] for name, start in self.instances]}


def config(document: Any, name: str) -> tuple[Entry, ...]:
    """The entries of config ``name`` of a loaded mig-parted document."""
    if not isinstance(document, Mapping):
        raise LayoutError("version", "the file is not a mig-parted document (a mapping)")
    if document.get("version") != VERSION:
        raise LayoutError("version", f"must be {VERSION!r}, not {document.get('version')!r}")
    configs = document.get("mig-configs")
    if not isinstance(configs, Mapping) or not configs:
        raise LayoutError("mig-configs", "must map config names to lists of entries")
    if name not in configs:
        known = ", ".join(sorted(str(k) for k in configs)[:20])
        raise LayoutError("name", f"no config {name!r} in mig-configs (it has: {known})")
    entries = configs[name]
    where = f"mig-configs.{name}"
    if not isinstance(entries, list) or not entries:
        raise LayoutError(where, "must be a non-empty list of entries")
    return tuple(_entry(raw, f"{where}[{i}]") for i, raw in enumerate(entries))


def _entry(raw: Any, where: str) -> Entry:
    if not isinstance(raw, Mapping):
        raise LayoutError(where, "must be a mapping")
    unknown = sorted(str(k) for k in raw if k not in ENTRY_KEYS)
    if unknown:
        raise LayoutError(f"{where}.{unknown[0]}",
                          "not supported (devices, mig-enabled and mig-devices are)")
    enabled = raw.get("mig-enabled")
    if not isinstance(enabled, bool):
        raise LayoutError(f"{where}.mig-enabled", "must be true or false")
    counts = _counts(raw.get("mig-devices"), f"{where}.mig-devices")
    if counts and not enabled:
        raise LayoutError(f"{where}.mig-devices", "must be empty when mig-enabled is false")
    return Entry(devices=_devices(raw.get("devices"), f"{where}.devices"), enabled=enabled,
                 counts=counts)


def _devices(raw: Any, where: str) -> tuple[int, ...] | None:
    if raw == "all":
        return None
    if not isinstance(raw, list) or not raw or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in raw):
        raise LayoutError(where, 'must be "all" or a non-empty list of GPU indices')
    return tuple(sorted(set(raw)))


def _counts(raw: Any, where: str) -> tuple[tuple[str, int], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise LayoutError(where, "must map MIG profiles to counts")
    out: list[tuple[str, int]] = []
    for profile, count in raw.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise LayoutError(f"{where}.{profile}", "must be a count (0 or more)")
        if count:
            out.append((str(profile), count))
    return tuple(sorted(out))


def entry_for(entries: Sequence[Entry], index: int) -> int | None:
    """The position of the entry that sets GPU ``index`` (the last naming it), or None."""
    return next((i for i in reversed(range(len(entries))) if entries[i].covers(index)), None)


def layouts(entries: Sequence[Entry], gpus: Mapping[int, str],
            where: str = "mig-configs") -> dict[int, FixedLayout]:
    """Each GPU's layout (``gpus``: index -> model) under ``entries``; a GPU no entry names
    is left out. Refuses a device index that is not a GPU of ``gpus``, a profile not of the
    GPU's model, and counts that no valid placement holds."""
    for i, entry in enumerate(entries):
        missing = [d for d in entry.devices or () if d not in gpus]
        if missing:
            raise LayoutError(f"{where}[{i}].devices",
                              f"GPU index {missing[0]} out of range (GPUs: "
                              f"{', '.join(str(g) for g in sorted(gpus))})")
    out: dict[int, FixedLayout] = {}
    for index, model_name in sorted(gpus.items()):
        at = entry_for(entries, index)
        if at is None:
            continue
        entry, field = entries[at], f"{where}[{at}].mig-devices"
        out[index] = FixedLayout(entry.enabled,
                                 pack(model_name, entry.counts, field) if entry.enabled else ())
    return out


def pack(model_name: str, counts: Sequence[tuple[str, int]],
         field: str = "mig-devices") -> tuple[Instance, ...]:
    """The instances of ``counts`` at valid start slots, deterministically: the largest
    profiles first, each at the lowest start that still lets the rest fit."""
    model = model_for(model_name)
    if model is None:
        raise LayoutError(field, f"GPU model {model_name} has no MIG")
    if not counts:
        return ()
    wanted: list[MigProfile] = []
    for name, count in counts:
        try:
            wanted += [model.profile(name)] * count
        except KeyError:
            known = ", ".join(p.name for p in model.profiles)
            raise LayoutError(f"{field}.{name}",
                              f"not a MIG profile of {model.name} ({known})") from None
    wanted.sort(key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    layout = _search(model, wanted, ())
    if layout is None:
        text = ", ".join(f"{n}: {c}" for n, c in counts)
        raise LayoutError(field, f"{text} do not fit one {model.name} at valid placements")
    return tuple(sorted(layout, key=lambda i: (i[1], i[0])))


def _search(model: MigModel, wanted: Sequence[MigProfile],
            layout: tuple[Instance, ...]) -> tuple[Instance, ...] | None:
    if not wanted:
        return layout
    profile, rest = wanted[0], wanted[1:]
    for start in profile.starts:
        if can_add(model, profile, start, layout):
            found = _search(model, rest, (*layout, (profile.name, start)))
            if found is not None:
                return found
    return None


def from_wire(raw: Any) -> FixedLayout | None:
    """A stored layout (``FixedLayout.as_wire``) back, or None when it is not one."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("mig-enabled"), bool):
        return None
    instances = tuple((str(i[0]), int(i[1])) for i in raw.get("instances") or []
                      if isinstance(i, list) and len(i) == 2 and isinstance(i[1], int))
    return FixedLayout(raw["mig-enabled"], instances if raw["mig-enabled"] else ())
