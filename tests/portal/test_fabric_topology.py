"""The leasing adapter hands the core the switch graph of an imported fabric (issue 11.6).

Recorded ibnetdiscover output (4 leaves × 2 spines, 16 hosts); one test cuts the cable
between leaf-04 and spine-01 (the lowest-GUID spine): the tree model then hung leaf-04
under spine-02 and every other leaf under spine-01, so leaf-01 and leaf-04 looked two
levels apart; they are one spine (spine-02) apart.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from portal.inventory.services import NodeSpec, nodes_import
from portal.leasing import allocation

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ibnetdiscover" / "fat-tree.txt"

pytestmark = pytest.mark.services


@pytest.fixture
def hosts(db: Any) -> None:
    nodes_import(actor=None, specs=[NodeSpec(f"gpu-node-{i:02d}", "H100", 8)
                                    for i in range(1, 17)])


def _import(text: str, tmp_path: Path) -> None:
    path = tmp_path / "fabric.txt"
    path.write_text(text)
    call_command("import_fabric", str(path), stdout=StringIO())


def test_every_uplink_reaches_the_core(hosts: None, tmp_path: Path) -> None:
    _import(FIXTURE.read_text(), tmp_path)
    topo = allocation._topology()
    assert len(topo.links) == 8  # 4 leaves × 2 spines, none dropped
    assert len(topo.attach) == 16 and all(len(s) == 1 for s in topo.attach.values())
    assert topo.hops("gpu-node-01", "gpu-node-02") == 0
    assert topo.hops("gpu-node-01", "gpu-node-16") == 1


def test_multi_spine_hops_from_ibnetdiscover(hosts: None, tmp_path: Path) -> None:
    lines = FIXTURE.read_text().splitlines()
    kept = [ln for ln in lines if not ln.startswith('[17]\t"S-0000000000200004"[4]')
            and not ln.startswith('[4]\t"S-0000000000200003"[17]')]
    assert len(kept) == len(lines) - 2
    _import("\n".join(kept), tmp_path)
    topo = allocation._topology()
    assert len(topo.links) == 7
    assert topo.hops("gpu-node-01", "gpu-node-16") == 1  # via spine-02
