"""Which agent release understands which newer-only part of the protocol (N-1 upgrades).

A portal of this version serves agents of the last release too (docs/operations.md,
"Agents of the previous release"). Protocol 1 stays the same wire; what a newer agent
adds is desired-state keys an older one ignores. The portal asks ``supports`` before it
relies on one (it never waits for an answer an old agent cannot give). An agent whose
version is unknown (it has not reported yet) or unparsable is taken to be current: the
request simply waits for its report, as for any agent.
"""

from __future__ import annotations

import re

Version = tuple[int, int, int]

# feature -> the first agent release that has it
FEATURES: dict[str, Version] = {
    # desired ``validation`` {"id", "level"} -> observed ``validation`` (issue 27)
    "validation": (0, 2, 0),
    # desired ``mig`` layout per GPU and ``mig_devices`` per grant (issue 28)
    "mig": (0, 2, 0),
}

_VERSION = re.compile(r"^\s*v?(\d{1,4})\.(\d{1,4})(?:\.(\d{1,4}))?")


def parse_version(text: str) -> Version | None:
    """``"0.2.0"`` -> (0, 2, 0); a suffix (``0.2.0rc1``, ``0.2.0+deb12``) is ignored."""
    match = _VERSION.match(text or "")
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def supports(agent_version: str, feature: str) -> bool:
    """Whether an agent that reported ``agent_version`` understands ``feature``."""
    have = parse_version(agent_version)
    return have is None or have >= FEATURES[feature]


def first_release(feature: str) -> str:
    return ".".join(str(part) for part in FEATURES[feature])
