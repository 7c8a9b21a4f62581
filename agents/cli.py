"""``python -m agents node|fabric|simulate`` (see docs/agent-protocol.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from agents import config, jsonlog, sdnotify
from agents.client.portal import PortalClient
from agents.host import FakeHost, HostCollector, RealHost, host_for_root
from agents.metrics import MetricsServer, SampleCollector, render_sample
from agents.node.access import FileAccess
from agents.node.agent import AgentSettings, NodeAgent
from agents.node.apply import NodeApplier
from agents.node.cleaning import GpuCleaner
from agents.node.dcgm import DcgmRunner
from agents.node.ipoib import IpLinkIpoib, IpoibManager, SysfsIpoib
from agents.node.migapply import MigApplier
from agents.node.validate import NodeValidator
from agents.nvml import binding
from agents.nvml.collector import NvmlCollector
from agents.nvml.fake import FakeNvml
from agents.nvml.faults import FaultFile
from agents.nvml.migcaps import MigCapabilities
from agents.nvml.xid import XidWatcher
from agents.sysfs.infiniband import InfinibandCollector
from agents.telemetry import Sampler, to_wire

log = logging.getLogger("agents")


def open_nvml(fake_gpus: str, hostname: str) -> tuple[Any, str | None]:
    """(api, None) or (None, why NVML is unavailable)."""
    api: Any = FakeNvml(fake_gpus, host=hostname) if fake_gpus else binding.real_api()
    try:
        api.nvmlInit()
    except binding.NVMLError as exc:
        return None, str(exc)
    return api, None


def build_sampler(sysfs_root: str, proc_root: str, fake_gpus: str) -> tuple[Sampler, Any]:
    host = HostCollector(proc_root)
    api, error = open_nvml(fake_gpus, host.collect().hostname)
    if error is not None:
        print(f"gpupool-agent: no GPU driver (NVML: {error}); reporting InfiniBand and host "
              "data only", file=sys.stderr)  # fmt: skip
    nvml = NvmlCollector(api) if api is not None else None
    return Sampler(host, InfinibandCollector(sysfs_root), nvml, nvml_error=error), api


def cmd_node_once(args: argparse.Namespace) -> int:
    sampler, _ = build_sampler(args.sysfs_root, args.proc_root, args.fake_gpus or "")
    sample = sampler.sample()
    if args.format == "prometheus":
        sys.stdout.write(render_sample(sample).decode())
    else:
        json.dump(to_wire(sample), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    return 0


def _stop_event() -> threading.Event:
    stop = threading.Event()

    def handler(signum: int, frame: object) -> None:
        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def _client(cfg: dict[str, dict[str, Any]]) -> PortalClient:
    portal = cfg["portal"]
    if not portal["url"]:
        raise config.ConfigError("portal.url is required (or GPUPOOL_AGENT_PORTAL_URL)")
    return PortalClient(portal["url"], timeout_s=float(portal["timeout_s"]),
                        verify=portal["ca_file"] or True)  # fmt: skip


def _settings(cfg: dict[str, dict[str, Any]], role: str) -> AgentSettings:
    a = cfg["agent"]
    return AgentSettings(
        state_dir=Path(a["state_dir"]), bootstrap_token=cfg["portal"]["bootstrap_token"] or None,
        role=role, sample_interval_s=float(a["sample_interval_s"]),
        report_interval_s=float(a["report_interval_s"]),
        max_spooled_reports=int(a["max_spooled_reports"]), long_poll_s=int(a["long_poll_s"]),
    )  # fmt: skip


def _metrics(listen: str, coll: SampleCollector) -> MetricsServer | None:
    if not listen:
        return None
    host, _, port = listen.rpartition(":")
    registry = CollectorRegistry()
    registry.register(coll)
    server = MetricsServer(registry, host=host or "0.0.0.0", port=int(port))  # noqa: S104
    server.start()
    log.info("metrics listening", extra={"listen": listen, "port": server.port})
    return server


def build_applier(hw: dict[str, Any], sampler: Sampler, api: Any) -> NodeApplier:
    """The node's applier; every host command goes to the real host only if
    ``access_root`` is ``/`` (a recording fake otherwise: tests, demo, temp roots)."""
    host = host_for_root(hw["access_root"])
    if isinstance(host, FakeHost) and isinstance(api, FakeNvml):
        host.handlers.append(api.host_handler)  # demo: a kill ends the fake's processes
    managers: dict[str, IpoibManager] = {
        "sysfs": SysfsIpoib(hw["sysfs_root"]), "iplink": IpLinkIpoib(hw["sysfs_root"], host)
    }
    return NodeApplier(sampler.ib, FileAccess(hw["access_root"], host=host),
                       managers.get(hw["ipoib"]), hw["ipoib_parent"],
                       cleaner=GpuCleaner(api, host),
                       validator=build_validator(hw, sampler, host),
                       mig=MigApplier(api, host, caps=mig_capabilities(hw, api))
                       if api is not None else None)  # fmt: skip


def mig_capabilities(hw: dict[str, Any], api: Any) -> MigCapabilities | None:
    """Where the driver's MIG capability files are read: the proc root on a node; the
    fake NVML publishes its own under a sandboxed access root (none on the real root)."""
    if not isinstance(api, FakeNvml):
        return MigCapabilities(hw["proc_root"])
    root = Path(hw["access_root"])
    if root.resolve() == Path("/"):
        return None
    api.attach_caps(root / "proc")
    return MigCapabilities(root / "proc")


def build_validator(hw: dict[str, Any], sampler: Sampler, host: Any) -> NodeValidator:
    """Validation reads the hardware afresh (not the sampler's rates); ``dcgmi`` runs on
    the real host only, with its own time limit (a sandbox has no dcgmi)."""
    timeout = float(hw["dcgm_timeout_s"])
    dcgm = DcgmRunner(RealHost(timeout_s=timeout), timeout) if isinstance(host, RealHost) \
        else DcgmRunner(host, timeout, which=lambda name: None)
    return NodeValidator(lambda: to_wire(sampler.snapshot()), dcgm)


def _fault_file(hw: dict[str, Any], sampler: Sampler, api: Any) -> None:
    """``fake_faults``: the fake NVML follows a control file (``agents.nvml.faults``)."""
    if not hw["fake_faults"]:
        return
    if not isinstance(api, FakeNvml):
        raise config.ConfigError("hardware.fake_faults needs hardware.fake_gpus (the fake NVML)")
    nvml = sampler.nvml
    faults = FaultFile(hw["fake_faults"], api, on_clear=nvml.forget if nvml else None)
    sampler.before_sample = faults.poll


def cmd_node(args: argparse.Namespace) -> int:
    cfg = config.load(args.config, config.NODE_DEFAULTS)
    jsonlog.setup(cfg["log"]["level"])
    hw = cfg["hardware"]
    for key in ("fake_gpus", "fake_faults"):  # the command line over agent.toml
        if getattr(args, key) is not None:
            hw[key] = getattr(args, key)
    sampler, api = build_sampler(hw["sysfs_root"], hw["proc_root"], hw["fake_gpus"])
    _fault_file(hw, sampler, api)
    watcher = None
    if api is not None and sampler.nvml is not None:
        watcher = XidWatcher(api, sampler.nvml)
        watcher.start()
        sampler.xid_source = watcher.drain
    applier = build_applier(hw, sampler, api)
    agent = NodeAgent(_settings(cfg, "node"), _client(cfg), sampler, applier)
    if watcher is not None:
        watcher.on_critical = agent.xid_news
    return _run(agent, cfg, watcher, api)


def cmd_fabric(args: argparse.Namespace) -> int:
    from agents.fabric.applier import FabricApplier
    from agents.fabric.base import FabricManager, FakeFabric
    from agents.fabric.opensm import OpenSmManager
    from agents.fabric.ufm import UfmManager

    cfg = config.load(args.config, config.FABRIC_DEFAULTS)
    jsonlog.setup(cfg["log"]["level"])
    f = cfg["fabric"]
    manager: FabricManager
    if f["driver"] == "opensm":
        manager = OpenSmManager(Path(f["partitions_conf"]), pid_file=Path(f["opensm_pid_file"]),
                                diag_prefix=f["diag_prefix"].split(),
                                default_membership=f["default_membership"],
                                parallel=int(f["read_back_parallel"]))  # fmt: skip
    elif f["driver"] == "ufm":
        lo, _, hi = f["pkey_range"].partition("-")
        manager = UfmManager(f["ufm_url"], f["ufm_username"], f["ufm_password"],
                             verify=f["ufm_ca_file"] or True,
                             managed_range=(int(lo, 16), int(hi, 16)),
                             managed_prefix=f["ufm_managed_prefix"])  # fmt: skip
    elif f["driver"] == "fake":
        manager = FakeFabric()
    else:
        raise config.ConfigError(f"fabric.driver: unknown {f['driver']!r} (opensm|ufm|fake)")
    hw = cfg["hardware"]
    sampler = Sampler(HostCollector(hw["proc_root"]), InfinibandCollector(hw["sysfs_root"]),
                      None, nvml_error="fabric role: GPUs not collected")  # fmt: skip
    applier = FabricApplier(manager, verify_timeout_s=float(f["verify_timeout_s"]))
    agent = NodeAgent(_settings(cfg, "fabric"), _client(cfg), sampler, applier)
    return _run(agent, cfg, None, None)


def _run(agent: NodeAgent, cfg: dict[str, dict[str, Any]], watcher: XidWatcher | None,
         api: Any) -> int:  # fmt: skip
    stop = _stop_event()
    coll = SampleCollector()
    systemd = sdnotify.Notifier()

    mig_now = getattr(agent.applier, "mig_instances", list)  # the fabric has none

    def on_sample(sample: Any) -> None:  # each sample proves the loop alive: ping systemd
        coll.set(sample, mig=mig_now())
        systemd.watchdog()

    agent.on_sample = on_sample
    server = _metrics(cfg["metrics"]["listen"], coll)
    log.info("agent started", extra={"role": agent.s.role, "state_dir": str(agent.s.state_dir)})
    systemd.ready(f"{agent.s.role} agent running")
    try:
        agent.run(stop)
    finally:
        systemd.stopping()
        if server is not None:
            server.stop()
        if watcher is not None:
            watcher.stop()
        if api is not None:
            with contextlib.suppress(binding.NVMLError):
                api.nvmlShutdown()
        agent.client.close()
        log.info("agent stopped", extra={"spooled": len(agent.spool), "sent": agent.sent})
    return 0


def cmd_faketree(args: argparse.Namespace) -> int:
    from agents.sysfs.faketree import FakeSysfsWriter, gpu_node_hcas

    writer = FakeSysfsWriter(args.out)
    for hca in gpu_node_hcas(args.node_index, args.hcas):
        writer.add(hca)
    print(args.out)
    return 0


def cmd_fakeportal(args: argparse.Namespace) -> int:
    from agents.client.fakeportal import FakePortal, serve

    jsonlog.setup("INFO")
    portal = FakePortal()
    host, _, port = args.listen.rpartition(":")
    server = serve(portal, host or "127.0.0.1", int(port))
    token = portal.issue_bootstrap_token(uses=args.token_uses)
    print(json.dumps({"url": f"http://{host}:{server.server_address[1]}",
                      "bootstrap_token": token}), flush=True)  # fmt: skip
    stop = _stop_event()
    while not stop.wait(10):
        log.info("fake portal", extra={"nodes": len(portal.nodes), "reports": sum(
            len(n.reports) for n in portal.nodes.values())})  # fmt: skip
    server.shutdown()
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from agents import doctor

    defaults = config.NODE_DEFAULTS if args.role == "node" else config.FABRIC_DEFAULTS
    cfg = config.load(args.config, defaults)
    found = doctor.run_checks(cfg, args.config, args.role)
    sys.stdout.write(doctor.render(found, args.format))
    return doctor.exit_code(found)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpupool-agent", description="gpupool agents")
    sub = p.add_subparsers(dest="command", required=True)
    node = sub.add_parser("node", help="GPU host agent")
    node.add_argument("--config", type=Path, help="agent.toml")
    node.add_argument("--once", action="store_true", help="print one sample and exit")
    node.add_argument("--sysfs-root", default="/sys")
    node.add_argument("--proc-root", default="/proc")
    node.add_argument("--fake-gpus", default=None, help="e.g. h100x8 or h100x4,a100x4")
    node.add_argument("--fake-faults", default=None, type=str,
                      help="JSON-lines fault control file for the fake NVML (with --fake-gpus)")
    node.add_argument("--format", choices=("json", "prometheus"), default="json")
    fabric = sub.add_parser("fabric", help="subnet-manager host agent")
    fabric.add_argument("--config", type=Path, required=True, help="fabric.toml")
    doc = sub.add_parser("doctor", help="check this host and say what is wrong (exit 1)")
    doc.add_argument("--config", type=Path, help="agent.toml or fabric.toml")
    doc.add_argument("--role", choices=("node", "fabric"), default="node")
    doc.add_argument("--format", choices=("text", "json"), default="text")
    tree = sub.add_parser("faketree", help="write a fake sysfs InfiniBand tree (demo, tests)")
    tree.add_argument("--out", type=Path, required=True, help="directory playing /sys")
    tree.add_argument("--node-index", type=int, default=1)
    tree.add_argument("--hcas", type=int, default=1)
    fp = sub.add_parser("fakeportal", help="serve the in-memory reference portal (demo)")
    fp.add_argument("--listen", default="127.0.0.1:8765")
    fp.add_argument("--token-uses", type=int, default=1000)
    sim = sub.add_parser("simulate", help="many fake node agents against a portal")
    from agents.sim.simulate import add_arguments

    add_arguments(sim)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "node":
            if args.once:
                return cmd_node_once(args)
            if args.config is None:
                print("node: --config agent.toml (or --once)", file=sys.stderr)
                return 2
            return cmd_node(args)
        if args.command == "fabric":
            return cmd_fabric(args)
        if args.command == "doctor":
            return cmd_doctor(args)
        if args.command == "faketree":
            return cmd_faketree(args)
        if args.command == "fakeportal":
            return cmd_fakeportal(args)
        from agents.sim.simulate import run as simulate

        return simulate(args)
    except config.ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
