"""The agent's subcommands: ``agent`` (run on a device) and ``simulate`` (a fleet of simulated devices).

Settings precedence, one rule for every key: a flag beats its environment variable
(``FLEETSCOPE_COLLECTOR``, ``FLEETSCOPE_TOKEN``, ``FLEETSCOPE_NAME``, ``FLEETSCOPE_SPOOL``), which
beats the ``[agent]`` table of a ``--config`` file, which beats the default (``fleetscope.cli.config``
applies the environment and the file after parsing).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetscope.cli.args import (
    collector_address_problem,
    duration_s,
    label,
    listen_address,
    positive_duration_s,
    rate_bytes_per_s,
    size_bytes,
)

if TYPE_CHECKING:
    from fleetscope.agent.samplers.registry import SamplerSettings

log = logging.getLogger(__name__)
# Readings leave in batches of this many seconds unless --batch-interval says otherwise; the Fleet
# page is at most that much behind, and incidents and logs leave at once whatever it is. A server
# on a LAN: 10 s, 1.4 bytes a reading. A Jetson, most often on a metered radio or cellular link:
# 60 s, 1.9 bytes a reading where 10 s costs 3.2, and a 256 MiB spool holds a month out of
# coverage (benchmarks/bench_wire_bytes.py, docs/benchmarks.md).
DEFAULT_BATCH_INTERVAL_S = 10.0
JETSON_BATCH_INTERVAL_S = 60.0


def default_batch_interval_s(kind: int) -> float:
    """The --batch-interval a device of ``kind`` (a DeviceKind) gets when none is given."""
    from fleetscope.proto.v1.telemetry_pb2 import DEVICE_KIND_JETSON

    return JETSON_BATCH_INTERVAL_S if kind == DEVICE_KIND_JETSON else DEFAULT_BATCH_INTERVAL_S


def default_spool_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/fleetscope/agent")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fleetscope" / "agent"


def state_dir_problem(path: Path) -> str | None:
    """Why the agent cannot keep its id and spool in ``path`` (made when missing), or None."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"--spool {path}: cannot create the state directory: {exc.strerror or exc}"
    if not path.is_dir():
        return f"--spool {path}: not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"--spool {path}: cannot write in the state directory (permission denied)"
    return None


def _env_list(name: str) -> list[str]:
    value = os.environ.get(name, "")
    return [v.strip() for v in value.split(",") if v.strip()]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "agent",
        help="run the agent on this device",
        description="Sample this device (host, NVIDIA GPUs, Jetson), follow logs, spool to disk and stream to collectors.",
    )
    p.add_argument("--collector", action="append", default=None, metavar="HOST:PORT",
                   help="collector address; repeat for failover, or give a DNS name with an address per collector "
                        "(agents spread over them and skip a dead one) (env FLEETSCOPE_COLLECTOR, comma-separated)")
    p.add_argument("--token", default=os.environ.get("FLEETSCOPE_TOKEN", ""),
                   help="enrolment or collector token (env FLEETSCOPE_TOKEN); as a flag it shows in /proc/PID/cmdline: prefer --token-file")
    p.add_argument("--name", default=os.environ.get("FLEETSCOPE_NAME", ""), help="device name users query by (default: hostname)")
    from fleetscope.agent.daemon.credentials import add_agent_arguments

    add_agent_arguments(p)  # --token-file, --tls-ca, --tls-cert, --tls-key
    p.add_argument("--label", type=label, action="append", default=[], metavar="KEY=VALUE",
                   help="a label such as site=lab, fleet=drones, drone_id=D12 (repeatable)")
    p.add_argument("--interval", type=positive_duration_s, default=1.0, metavar="DURATION", help="sampling interval (default 1s)")
    p.add_argument("--batch-interval", type=positive_duration_s, default=None, metavar="DURATION",
                   help="how often the readings gathered meanwhile leave as one batch (default 10s, 60s on a Jetson, or "
                        "the sampling interval when longer); logs and incidents leave at once whatever this is. Longer "
                        "costs a metered link less a reading: a Jetson's 3.2 bytes at 10s, 1.9 at 60s (docs/benchmarks.md)")
    p.add_argument("--spool", type=Path, default=Path(os.environ.get("FLEETSCOPE_SPOOL", default_spool_dir())), metavar="DIR",
                   help="state directory: agent id and the on-disk spool (default %(default)s)")
    p.add_argument("--spool-max-size", type=size_bytes, default=256 << 20, metavar="SIZE", help="spool bound (default 256MiB)")
    p.add_argument("--uplink-rate", type=rate_bytes_per_s, default=0.0, metavar="RATE",
                   help="never send faster than this, for a metered or radio link, e.g. 32kbit/s, 4KB/s, 1Mbit/s, 500B/s "
                        "(bit/s, bps or B/s; k, M, G decimal, Ki, Mi, Gi binary); a batch counts as its bytes and 40 for "
                        "HTTP/2 and gRPC framing, not TLS or TCP/IP headers: give a little less than the link carries. "
                        "Incidents and logs go before a backlog of samples whatever the rate (default: unlimited)")
    p.add_argument("--log-file", action="append", default=[], metavar="PATH",
                   help="a log file or glob to follow (repeatable), e.g. '/var/log/train/*.log'")
    p.add_argument("--no-kernel-log", action="store_true",
                   help="do not follow the kernel log (/dev/kmsg, or journalctl -k) for OOM kills and Xid errors")
    p.add_argument("--journal-unit", action="append", default=[], metavar="UNIT",
                   help="also follow this systemd unit's journal (repeatable), e.g. triton.service")
    p.add_argument("--sdk-socket", default=os.environ.get("FLEETSCOPE_SDK_SOCKET"), metavar="PATH",
                   help="Unix socket for the in-process SDK (e.g. /run/fleetscope/agent.sock); off by default")
    p.add_argument("--no-host", action="store_true", help="do not sample the host with psutil")
    p.add_argument("--no-gpu", action="store_true", help="do not sample NVIDIA GPUs through NVML")
    p.add_argument("--tegrastats-cmd", metavar="COMMAND",
                   help="take Jetson readings from this command's tegrastats lines (on a Jetson the default is "
                   "'tegrastats --interval <ms>'; 'cat FILE' replays a recording)")
    p.add_argument("--jetson-source", choices=["sysfs", "tegrastats"], default="sysfs",
                   help="on a Jetson, read sysfs (cheaper, the default) or run tegrastats (adds EMC load and engines)")
    p.add_argument("--duration", type=duration_s, default=None, metavar="DURATION", help="stop after this long (default: run until stopped)")
    p.add_argument("--metrics-listen", type=listen_address, default=None, metavar="HOST:PORT",
                   help="serve the agent's own Prometheus metrics (/metrics) and /healthz here, e.g. 127.0.0.1:9465 (default: off)")
    p.set_defaults(func=run_agent)
    from fleetscope.agent.tools.install_args import register_subcommands

    register_subcommands(p)  # agent install | uninstall | bundle

    p = sub.add_parser(
        "simulate",
        help="run N simulated devices (GPU servers and Jetson drones) through real agents",
        description="Simulated devices with plausible, varying readings, streamed by real agent code over real gRPC. "
        "Their data carries the label simulated=true.",
    )
    p.add_argument("--collector", action="append", required=True, metavar="HOST:PORT", help="collector address (repeatable)")
    p.add_argument("--token", default=os.environ.get("FLEETSCOPE_TOKEN", ""), help="collector token (env FLEETSCOPE_TOKEN)")
    p.add_argument("--devices", type=int, default=10, help="number of devices (default %(default)s)")
    p.add_argument("--jetson-share", type=float, default=0.5, help="fraction that are Jetson drones (default %(default)s)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per server (default %(default)s)")
    p.add_argument("--interval", type=positive_duration_s, default=1.0, metavar="DURATION", help="sampling interval (default 1s)")
    p.add_argument("--duration", type=duration_s, default=None, metavar="DURATION", help="stop after this long (default: until Ctrl-C)")
    p.add_argument("--incident-every", type=duration_s, default=0.0, metavar="DURATION",
                   help="mean time between incidents, per device: each simulated device writes a realistic incident "
                        "to its log at random intervals averaging DURATION (never closer than 45 s): a CUDA OOM whose "
                        "figures match its GPU memory, which climbs toward it first, or on a server, one time in four, "
                        "an NVIDIA Xid. The agent's classifiers turn these lines into incidents, as for a real log. "
                        "20m gives a 10-device fleet about 30 incidents an hour. Default: none")
    p.add_argument("--state-dir", type=Path, default=None, metavar="DIR", help="where the simulated agents keep spools (default: a temp dir)")
    p.add_argument("--name-prefix", default="sim", help="device names start with this (default %(default)s)")
    p.set_defaults(func=run_simulate)

    from fleetscope.agent.tools.doctor_args import DOCTOR_DESCRIPTION, add_doctor_arguments

    p = sub.add_parser("doctor", help="check torch/CUDA/ONNX Runtime/TensorRT settings that slow training or inference",
                       description=DOCTOR_DESCRIPTION)
    add_doctor_arguments(p)
    p.set_defaults(func=run_doctor)


def _stop_on_signals(stop: threading.Event) -> None:
    def handler(signum: int, _frame: object) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


def sampler_settings(args: argparse.Namespace) -> SamplerSettings:
    """What the ``agent`` flags say to sample; the registry decides what this device has of it."""
    from fleetscope.agent.samplers.registry import SamplerSettings

    return SamplerSettings(
        host=not args.no_host,
        nvml=not args.no_gpu,
        jetson_source=args.jetson_source,
        tegrastats_cmd=args.tegrastats_cmd,
        interval_s=args.interval,
    )


def run_agent(args: argparse.Namespace) -> int:
    from fleetscope.cli.extras import require

    require("agent", "psutil")
    from fleetscope.agent.classify import event_classifier
    from fleetscope.agent.daemon.footprint import limit_malloc_arenas
    from fleetscope.agent.daemon.identity import detect_kind
    from fleetscope.agent.daemon.runner import Agent, AgentSettings
    from fleetscope.agent.samplers.registry import default_samplers
    from fleetscope.proto.v1.telemetry_pb2 import DEVICE_KIND_JETSON

    limit_malloc_arenas()  # before any thread starts: see agent/daemon/footprint.py
    collectors = args.collector or _env_list("FLEETSCOPE_COLLECTOR")
    if not collectors:
        print("fleetscope agent: give at least one --collector HOST:PORT (or FLEETSCOPE_COLLECTOR)", file=sys.stderr)
        return 2
    for address in collectors:
        if problem := collector_address_problem(address):
            print(f"fleetscope agent: {problem}", file=sys.stderr)
            return 2
    if problem := state_dir_problem(args.spool):
        print(f"fleetscope agent: {problem}", file=sys.stderr)
        return 2
    from fleetscope.agent.daemon.credentials import agent_credentials

    token, tls = agent_credentials(args)  # exits 2 with one line for an unreadable file
    settings = AgentSettings(
        collectors=tuple(collectors),
        spool_dir=args.spool,
        token=token,
        tls=tls,
        name=args.name,
        labels=dict(args.label),
        interval_s=args.interval,
        batch_interval_s=args.batch_interval or max(default_batch_interval_s(detect_kind()), args.interval),
        spool_max_bytes=args.spool_max_size,
        uplink_rate_bytes_per_s=args.uplink_rate,
        log_files=tuple(args.log_file),
        kernel_log=not args.no_kernel_log,
        journal_units=tuple(args.journal_unit),
        sdk_socket=args.sdk_socket,
    )
    # The sources this device has; a missing one is said once and skipped.
    samplers = default_samplers().build(sampler_settings(args))
    stop = threading.Event()
    classify = event_classifier(device_is_jetson=detect_kind() == DEVICE_KIND_JETSON)
    agent = Agent(settings, samplers=samplers, classify=classify, on_fatal=lambda _exc: stop.set())
    _stop_on_signals(stop)
    print(f"fleetscope agent {agent.agent_id} ({settings.name or 'hostname'}) -> {', '.join(collectors)}; spool {agent.spool.path}",
          file=sys.stderr)
    agent.start()
    metrics = None
    if args.metrics_listen:
        from fleetscope.agent.daemon.metrics import AgentMetricsServer

        try:
            metrics = AgentMetricsServer(agent, args.metrics_listen).start()
        except (OSError, ValueError) as exc:  # the agent's work matters more than its metrics
            print(f"fleetscope agent: metrics not served on {args.metrics_listen}: {exc}", file=sys.stderr)
    stop.wait(args.duration)
    if metrics is not None:
        metrics.stop()
    agent.stop()
    if agent.fatal is not None:
        # A supervisor (systemd Restart=on-failure, a container runtime) restarts a failed agent;
        # one that lingered with a dead loop would never be restarted.
        print(f"fleetscope agent: exiting after a fatal error: {type(agent.fatal).__name__}: {agent.fatal}", file=sys.stderr)
        return 1
    st = agent.spool.stats()
    print(f"agent stopped; {st.batches} batches left in the spool", file=sys.stderr)
    return 0


def run_doctor(args: argparse.Namespace) -> int:
    from fleetscope.agent.sdk._doctor import run_doctor as doctor

    return doctor(args)


def run_simulate(args: argparse.Namespace) -> int:
    from fleetscope.agent.classify import classify_event
    from fleetscope.agent.tools.simulate import build_fleet, wait_progress

    if args.devices < 1:
        print("fleetscope simulate: --devices must be at least 1", file=sys.stderr)
        return 2
    for address in args.collector:
        if problem := collector_address_problem(address):
            print(f"fleetscope simulate: {problem}", file=sys.stderr)
            return 2
    tmp = None
    state_dir = args.state_dir
    if state_dir is None:
        import tempfile  # here: with shutil, which it imports, memory an agent on a drone does not need

        tmp = tempfile.TemporaryDirectory(prefix="fleetscope-sim-")
        state_dir = Path(tmp.name)
    fleet = build_fleet(
        collectors=args.collector, token=args.token, devices=args.devices, state_dir=state_dir,
        interval_s=args.interval, jetson_share=args.jetson_share, gpus_per_server=args.gpus,
        incident_every_s=args.incident_every, classify=classify_event, name_prefix=args.name_prefix,
    )
    stop = threading.Event()
    _stop_on_signals(stop)
    print(f"simulating {args.devices} devices -> {', '.join(args.collector)} (Ctrl-C to stop)", file=sys.stderr)
    fleet.start()
    watcher = threading.Thread(target=wait_progress, args=(fleet, args.duration), daemon=True)
    watcher.start()
    stop.wait(args.duration)
    print("stopping simulated devices...", file=sys.stderr)
    fleet.stop()
    print(f"done: {fleet.acked()} batches acknowledged, {fleet.spooled()} left in spools", file=sys.stderr)
    if tmp is not None:
        tmp.cleanup()
    return 0
