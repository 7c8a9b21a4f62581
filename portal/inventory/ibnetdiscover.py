"""Parser for ``ibnetdiscover`` output (infiniband-diags), the topology operators have.

Pure: text in, dataclasses out; raises :class:`TopologyParseError` with the line number of
the first malformed line. Records look like::

    Switch	8 "S-0000000000200000"		# "Switch1" base port 0 lid 1 lmc 0
    [1]	"H-0000000000100000"[1](100001) 		# "Hca1" lid 2 4xSDR
    Ca	2 "H-0000000000100000"		# "Hca1"
    [1](100001) 	"S-0000000000200000"[1]		# lid 2 lmc 0 "Switch1" lid 1 4xSDR
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

NODE_RE = re.compile(
    r'^(?P<kind>Switch|Ca|Rt)\s+(?P<ports>\d+)\s+"(?P<id>[SHR]-[0-9a-fA-F]{16})"'
    r'(?:\s*#\s*"(?P<desc>[^"]*)"(?P<rest>.*))?$'
)
PORT_RE = re.compile(
    r'^\[(?P<port>\d+)\](?:\[ext \d+\])?(?:\((?P<guid>[0-9a-fA-F]+)\))?\s*'
    r'"(?P<rid>[SHR]-[0-9a-fA-F]{16})"\[(?P<rport>\d+)\](?:\[ext \d+\])?'
    r'(?:\((?P<rguid>[0-9a-fA-F]+)\))?\s*(?:#(?P<comment>.*))?$'
)
LID_RE = re.compile(r"\blid (\d+)")
SPEED_RE = re.compile(r"\b(\d+x[A-Z0-9]+)\s*$")
HEADER_KEYS = ("vendid=", "devid=", "sysimgguid=", "switchguid=", "caguid=", "rtguid=")


class TopologyParseError(ValueError):
    def __init__(self, line_no: int, message: str, line: str = "") -> None:
        super().__init__(f"line {line_no}: {message}" + (f": {line.strip()!r}" if line else ""))
        self.line_no = line_no


def guid_hex(raw: str) -> str:
    """Normalise a GUID to ``0x`` + 16 lower-case hex digits."""
    return "0x" + raw.lower().removeprefix("0x").zfill(16)


@dataclass
class PortLink:
    port: int
    remote_guid: str
    remote_port: int
    port_guid: str | None = None
    remote_port_guid: str | None = None
    speed: str = ""
    lid: int | None = None


@dataclass
class FabricNode:
    kind: str  # "switch" | "ca" | "router"
    guid: str
    ports: int
    description: str
    lid: int | None
    line_no: int
    links: list[PortLink] = field(default_factory=list)


@dataclass
class Topology:
    nodes: dict[str, FabricNode]

    @property
    def switches(self) -> list[FabricNode]:
        return [n for n in self.nodes.values() if n.kind == "switch"]

    @property
    def cas(self) -> list[FabricNode]:
        return [n for n in self.nodes.values() if n.kind == "ca"]


KINDS = {"Switch": "switch", "Ca": "ca", "Rt": "router"}


def _parse_node(line: str, line_no: int) -> FabricNode:
    match = NODE_RE.match(line)
    if match is None:
        raise TopologyParseError(line_no, "malformed node record", line)
    rest = match.group("rest") or ""
    lid = LID_RE.search(rest)
    return FabricNode(kind=KINDS[match.group("kind")], guid=guid_hex(match.group("id")[2:]),
                      ports=int(match.group("ports")), description=match.group("desc") or "",
                      lid=int(lid.group(1)) if lid else None, line_no=line_no)


def _parse_port(line: str, line_no: int, owner: FabricNode) -> PortLink:
    match = PORT_RE.match(line)
    if match is None:
        raise TopologyParseError(line_no, "malformed port line", line)
    port = int(match.group("port"))
    if port < 1 or (owner.ports and port > owner.ports):
        raise TopologyParseError(line_no, f"port {port} outside 1..{owner.ports}", line)
    comment = match.group("comment") or ""
    speed = SPEED_RE.search(comment)
    lids = LID_RE.findall(comment)
    return PortLink(
        port=port, remote_guid=guid_hex(match.group("rid")[2:]),
        remote_port=int(match.group("rport")),
        port_guid=guid_hex(match.group("guid")) if match.group("guid") else None,
        remote_port_guid=guid_hex(match.group("rguid")) if match.group("rguid") else None,
        speed=speed.group(1) if speed else "",
        lid=int(lids[0]) if lids and owner.kind == "ca" else None,
    )


def parse(text: str) -> Topology:
    """Parse the whole output; every node must be defined once; links must be symmetric."""
    nodes: dict[str, FabricNode] = {}
    current: FabricNode | None = None
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith(HEADER_KEYS):
            if not line:
                current = None
            continue
        if line.startswith("["):
            if current is None:
                raise TopologyParseError(line_no, "port line outside a node record", raw)
            current.links.append(_parse_port(line, line_no, current))
            continue
        node = _parse_node(line, line_no)
        if node.guid in nodes:
            raise TopologyParseError(line_no, f"node {node.guid} defined twice", raw)
        nodes[node.guid] = node
        current = node
    if not nodes:
        raise TopologyParseError(1, "no Switch or Ca records found")
    _check_links(nodes)
    return Topology(nodes=nodes)


def _check_links(nodes: dict[str, FabricNode]) -> None:
    for node in nodes.values():
        for link in node.links:
            remote = nodes.get(link.remote_guid)
            if remote is None:
                raise TopologyParseError(node.line_no, f"{node.guid} port {link.port} links to "
                                         f"{link.remote_guid}, which has no record")


def switch_levels(topology: Topology) -> dict[str, int]:
    """Distance of each switch from the hosts: 1 = leaf, 2 = spine, 3+ = core."""
    level: dict[str, int] = {}
    frontier = [n.guid for n in topology.switches
                if any(topology.nodes[lk.remote_guid].kind == "ca" for lk in n.links)]
    for guid in frontier:
        level[guid] = 1
    depth = 1
    while frontier:
        depth += 1
        nxt: list[str] = []
        for guid in frontier:
            for link in topology.nodes[guid].links:
                remote = topology.nodes[link.remote_guid]
                if remote.kind == "switch" and remote.guid not in level:
                    level[remote.guid] = depth
                    nxt.append(remote.guid)
        frontier = nxt
    for switch in topology.switches:  # islands without hosts: count them as spines
        level.setdefault(switch.guid, 2)
    return level


def hostname_from_description(description: str) -> str:
    """``"gpu-node-01 mlx5_0"`` → ``"gpu-node-01"`` (the convention of node_desc)."""
    return description.split()[0] if description.split() else ""
