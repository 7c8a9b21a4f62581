"""import_fabric on real ibnetdiscover output (recorded from ibsim + OpenSM)."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from portal.inventory import ibnetdiscover as ibn
from portal.inventory.models import Fabric, HcaPort, Node, Switch, SwitchLink
from portal.inventory.services import NodeSpec, nodes_import

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ibnetdiscover" / "fat-tree.txt"


def _run(*args: str) -> str:
    out = StringIO()
    call_command("import_fabric", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def hosts(db: Any) -> None:
    nodes_import(actor=None, specs=[NodeSpec(f"gpu-node-{i:02d}", "H100", 8)
                                    for i in range(1, 17)])


def test_parser_reads_switches_cas_and_port_guids() -> None:
    topo = ibn.parse(FIXTURE.read_text())
    assert len(topo.switches) == 6 and len(topo.cas) == 16
    levels = ibn.switch_levels(topo)
    by_desc = {n.description: levels[n.guid] for n in topo.switches}
    assert by_desc == {"leaf-01": 1, "leaf-02": 1, "leaf-03": 1, "leaf-04": 1,
                       "spine-01": 2, "spine-02": 2}
    ca = topo.nodes["0x000000000010001e"]
    assert ca.description == "gpu-node-16 mlx5_0"
    assert ca.links[0].port_guid == "0x000000000010001f"
    assert ca.links[0].lid == 22


def test_import_builds_roles_links_and_hca_mapping(hosts: None) -> None:
    _run(str(FIXTURE), "--fabric", "ib0")
    assert Switch.objects.filter(role="leaf").count() == 4
    assert Switch.objects.filter(role="spine").count() == 2
    assert SwitchLink.objects.count() == 8  # 4 leaves × 2 spines
    assert HcaPort.objects.count() == 16
    node = Node.objects.get(hostname="gpu-node-16")
    assert node.leaf is not None and node.leaf.description == "leaf-04"
    port = HcaPort.objects.get(port_guid="0x000000000010001f")
    assert port.node == node and port.lid == 22 and port.switch == node.leaf
    leaf_of = {n.hostname: n.leaf.description for n in Node.objects.select_related("leaf")}
    assert leaf_of["gpu-node-01"] == "leaf-01" and leaf_of["gpu-node-05"] == "leaf-02"


def test_reimport_is_idempotent_and_reports_no_change(hosts: None) -> None:
    _run(str(FIXTURE))
    counts = (Switch.objects.count(), SwitchLink.objects.count(), HcaPort.objects.count())
    out = _run(str(FIXTURE))
    assert out.strip().endswith("no changes")
    assert counts == (Switch.objects.count(), SwitchLink.objects.count(), HcaPort.objects.count())


def test_reimport_reports_a_removed_link(hosts: None, tmp_path: Path) -> None:
    _run(str(FIXTURE))
    lines = FIXTURE.read_text().splitlines()
    # cut the leaf-04 <-> spine-02 cable on both ends
    kept = [ln for ln in lines if not ln.startswith('[18]\t"S-0000000000200005"[4]')
            and '"S-0000000000200003"[18]' not in ln]
    assert len(kept) == len(lines) - 2
    changed = tmp_path / "cut.txt"
    changed.write_text("\n".join(kept))
    out = _run(str(changed))
    assert '"links": 1' in out
    assert SwitchLink.objects.count() == 7


def test_unknown_hosts_are_reported_or_created(db: Any) -> None:
    out = _run(str(FIXTURE))
    assert "gpu-node-03 mlx5_0" in out  # unmatched, listed
    assert Node.objects.count() == 0
    _run(str(FIXTURE), "--create-nodes")
    assert Node.objects.count() == 16


BAD = [
    ("Switch\t8 S-0000000000200000 # no quotes\n", 1, "malformed node record"),
    ('Switch\t8 "S-0000000000200000"\t# "sw"\n[1]\tgarbage\n', 2, "malformed port line"),
    ('[1]\t"H-0000000000100000"[1]\n', 1, "outside a node record"),
    ('Switch\t8 "S-0000000000200000"\t# "sw"\n[1]\t"H-0000000000100000"[1](100001)\n', 1,
     "has no record"),
    ('Switch\t8 "S-0000000000200000"\t# "sw"\n[99]\t"S-0000000000200000"[1]\n', 2,
     "outside 1..8"),
    ("", 1, "no Switch or Ca records"),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD)
def test_malformed_input_names_the_line_and_writes_nothing(db: Any, tmp_path: Path, text: str,
                                                            line: int, message: str) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text(text)
    with pytest.raises(CommandError) as err:
        _run(str(bad))
    assert f"line {line}:" in str(err.value) and message in str(err.value)
    assert Fabric.objects.count() == 0 and Switch.objects.count() == 0


def test_truncated_real_file_is_rejected_atomically(hosts: None, tmp_path: Path) -> None:
    text = FIXTURE.read_text()
    bad = tmp_path / "trunc.txt"
    bad.write_text(text.replace("[17]\t\"S-0000000000200004\"[4]", "[17]\t\"S-00000000", 1))
    with pytest.raises(CommandError, match="line"):
        _run(str(bad))
    assert Switch.objects.count() == 0 and HcaPort.objects.count() == 0


def test_import_fabric_dash_reads_stdin_regression(hosts: None) -> None:
    """``import_fabric -`` read ``self.stdin``, which a Django command does not have
    (AttributeError): it reads the stdin ``call_command`` passes, else the process's."""
    out = StringIO()
    call_command("import_fabric", "-", "--fabric", "ib0", stdin=StringIO(FIXTURE.read_text()),
                 stdout=out)
    assert Fabric.objects.filter(name="ib0").exists() and Switch.objects.exists()
