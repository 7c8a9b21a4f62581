"""The state groups of ``states.py`` (one home) agree with the transition table."""

from __future__ import annotations

import ast
from pathlib import Path

from portal.leasing import allocation, desired, handover, states
from portal.leasing.models import LeaseState as S


def test_state_groups_nest_and_agree_with_the_table() -> None:
    assert states.GRANTING < states.ON_HARDWARE < states.HOLDING
    assert states.CONVERGING <= states.ON_HARDWARE
    assert not states.HOLDING & states.TERMINAL and not states.WAITING & states.HOLDING
    assert {s for s in S.values if not states.ALLOWED[s]} == states.TERMINAL
    # every granting state can be released (teardown is how access ends)
    assert all(S.RELEASING in states.ALLOWED[s] for s in states.GRANTING)
    assert states.ALLOWED[S.RELEASING] <= states.TERMINAL


def test_modules_use_the_groups_of_states_py() -> None:
    assert set(allocation.LINGERING) == states.ON_HARDWARE
    assert set(allocation.HOLDING_STATES) == states.HOLDING
    assert set(desired.GRANTING) == states.GRANTING
    assert handover.ON_HARDWARE is states.ON_HARDWARE


def test_the_notice_is_running_granted_on_hardware_and_in_the_table() -> None:
    assert {S.ACTIVE, S.NOTICE} == states.RUNNING and states.RUNNING < states.GRANTING
    assert S.NOTICE in states.ALLOWED[S.ACTIVE] and states.ALLOWED[S.NOTICE] == {S.RELEASING}
    assert S.NOTICE not in states.EXTENDABLE and S.NOTICE in states.RELEASABLE
    assert set(S.values) - states.TERMINAL == states.LIVE
    # every state is reachable from REQUESTED through the table
    seen, todo = {S.REQUESTED}, [S.REQUESTED]
    while todo:
        for nxt in states.ALLOWED[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    assert seen == set(S.values)


def test_labels_and_tones_are_defined_once() -> None:
    from portal.leasing import notify
    from portal.web import labels

    assert set(states.LABELS) == set(S.values)
    assert labels.STATES is states.LABELS and labels.TONES is states.TONES
    assert notify.STATE_WORDS is states.WORDS and notify.EMAIL_STATES is states.MAILED


LEASE_ONLY = {"requested", "queued", "scheduled", "provisioning", "notice", "releasing",
              "ended", "rejected", "cancelled", "preempted", "expired"}


def _spelled_groups(path: Path) -> list[str]:
    """Collections of two or more lease states spelled out (enum members or values)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            elts = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            elts = node.elts
        else:
            continue
        members = [e for e in elts if isinstance(e, ast.Attribute)
                   and isinstance(e.value, ast.Name) and e.value.id in ("S", "LeaseState")]
        words = [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        strings = (len(words) >= 2 and len(words) == len(elts)
                   and set(words) <= LEASE_ONLY | {"active", "failed"}
                   and bool(set(words) & LEASE_ONLY))
        if len(members) >= 2 or strings:
            found.append(f"{path}:{node.lineno}")
    return found


def test_no_state_group_or_label_map_is_spelled_outside_states_py() -> None:
    root = Path(__file__).resolve().parents[3] / "portal"
    home = root / "leasing" / "states.py"
    spelled = [hit for path in sorted(root.rglob("*.py"))
               if path != home and "migrations" not in path.parts
               for hit in _spelled_groups(path)]
    assert spelled == []
