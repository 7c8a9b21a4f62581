"""NVIDIA's XID catalogue (``xid_catalogue.csv``, shipped in the repo) as policy rows.

Each XID's "Resolution Bucket (Immediate Action)" maps to an action here; the severity is
``info`` for the buckets NVIDIA says to ignore, else ``fatal``/``warning`` by the
catalogue's fatal flag; a fatal row fences (the GPU leaves its lease now). ``xid.default``
is the row for an XID the catalogue does not list.
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

from portal.fleet.policy.types import Action, Rule, Scope, Severity

CATALOGUE = Path(__file__).with_name("xid_catalogue.csv")

BUCKET_ACTIONS: dict[str, Action] = {
    "IGNORE": Action.NONE,
    "FOLLOW_OTHER_XID": Action.NONE,  # XID 154: the recovery_action signal carries it
    "WORKFLOW_XID_45": Action.NONE,  # preemptive cleanup after another error
    "RESTART_APP": Action.RESTART_APP,
    "CHECK_UVM": Action.RESTART_APP,
    "RESET_GPU": Action.RESET_GPU,
    "WORKFLOW_XID_48": Action.RESET_GPU,  # DBE: the row remap applies at the reset
    "WORKFLOW_NVLINK_ERR": Action.RESET_GPU,
    "WORKFLOW_NVLINK5_ERR": Action.RESET_GPU,
    "RESTART_BM": Action.REBOOT_NODE,
    "RESTART_VM": Action.REBOOT_NODE,  # bare metal here: the machine is the VM
    "CHECK_MECHANICALS": Action.DRAIN_REPLACE,
    "UPDATE_SWFW": Action.UPDATE_SOFTWARE,
    "UNEXPECTED_ERR_REPORT_ISSUE": Action.CONTACT_SUPPORT,
}
INFO_BUCKETS = frozenset({"IGNORE", "FOLLOW_OTHER_XID"})


def scope_of(action: Action) -> Scope:
    """What a GPU signal takes out of service: the node when the remedy is a reboot (it
    interrupts every GPU there, so every lease on it is moved now, not after the reboot),
    else the GPU alone."""
    return Scope.NODE if action is Action.REBOOT_NODE else Scope.GPU

DEFAULT_XID = Rule(
    key="xid.default", severity=Severity.WARNING, action=Action.CONTACT_SUPPORT,
    scope=Scope.GPU, fence=False,
    cause="an XID the catalogue does not list (newer driver?): reported, GPU kept in "
          "service until a person decides")


def _rule(xid: int, mnemonic: str, bucket: str, fatal: bool) -> Rule:
    if bucket not in BUCKET_ACTIONS:
        raise ValueError(f"{CATALOGUE.name}: XID {xid}: unknown bucket {bucket!r}")
    severity = (Severity.INFO if bucket in INFO_BUCKETS
                else Severity.FATAL if fatal else Severity.WARNING)
    action = BUCKET_ACTIONS[bucket]
    return Rule(key=f"xid.{xid}", severity=severity, action=action,
                scope=scope_of(action), fence=severity is Severity.FATAL,
                cause=f"XID {xid} {mnemonic or '(unnamed)'} ({bucket})",
                source="nvidia-xid-catalogue")


@cache
def catalogue_rows() -> tuple[tuple[int, str, str, bool], ...]:
    """``(xid, mnemonic, bucket, fatal)`` for every row of the shipped catalogue."""
    with CATALOGUE.open(newline="", encoding="utf-8") as handle:
        lines = [line for line in handle if not line.startswith("#")]
    return tuple((int(r["xid"]), r["mnemonic"], r["resolution_bucket"], r["fatal"] == "true")
                 for r in csv.DictReader(lines))


def xid_rules() -> dict[str, Rule]:
    """The catalogue as rows keyed ``xid.<n>``, plus ``xid.default``."""
    rules = {f"xid.{x}": _rule(x, name, bucket, fatal)
             for x, name, bucket, fatal in catalogue_rows()}
    rules[DEFAULT_XID.key] = DEFAULT_XID
    return rules
