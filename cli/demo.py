"""``fleetscope demo``: the whole system on this machine on the embedded default (SQLite).

It starts a collector on a SQLite file in a local folder, a real agent for this machine, a few
simulated devices so the fleet looks like one, and the dashboard when it is installed; prints
what runs where and how to query it; and stops everything cleanly on Ctrl-C (or after
``--duration``), printing what was stored.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fleetscope.cli.args import duration_s


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run collector, an agent for this machine, simulated devices and the dashboard",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", type=Path, default=Path("fleetscope-demo"), help="folder for the database and spools (default %(default)s)")
    p.add_argument("--port", type=int, default=0, help="collector port on 127.0.0.1 (default: any free port)")
    p.add_argument("--devices", type=int, default=4, help="simulated devices beside this machine (default %(default)s)")
    p.add_argument("--duration", type=duration_s, default=None, metavar="DURATION", help="stop after this long (default: until Ctrl-C)")
    p.add_argument("--dashboard-port", type=int, default=8501, help="dashboard port on 127.0.0.1 (default %(default)s)")
    p.add_argument("--no-dashboard", action="store_true", help="do not start the dashboard")
    p.add_argument("--fresh", action="store_true", help="delete the folder's earlier data first")
    p.set_defaults(func=run_demo)


def _dashboard_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("streamlit") is not None and importlib.util.find_spec("fleetscope.dashboard.app") is not None


def run_demo(args: argparse.Namespace) -> int:
    from fleetscope.cli.extras import require

    require("collector", "sqlalchemy")
    require("agent", "psutil")
    from fleetscope.agent.classify import classify_event
    from fleetscope.agent.daemon.runner import Agent, AgentSettings
    from fleetscope.agent.samplers.host import HostSampler
    from fleetscope.agent.tools.simulate import build_fleet, wait_progress
    from fleetscope.cli import demo_guide as guide
    from fleetscope.collector.ingest.server import Collector, CollectorSettings

    root = args.dir.resolve()
    if args.fresh and root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite:///{root / 'fleetscope.db'}"
    token = secrets.token_urlsafe(16)
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731

    # TLS, as a newcomer's own fleet should run: a CA and certificates made in the demo's folder.
    from fleetscope.agent.daemon.credentials import ChannelTLS
    from fleetscope.collector.commands.certs import init_certs
    from fleetscope.collector.ingest.tls import ServerTLS

    certs = root / "certs"
    init_certs(certs)
    agent_tls = ChannelTLS(ca=certs / "ca.pem")
    say(f"[1/4] collector: SQLite at {root / 'fleetscope.db'}, TLS with certificates in {certs}")
    collector = Collector(CollectorSettings(listen=f"127.0.0.1:{args.port}", db_url=db_url, tokens=frozenset([token]),
                                            tls=ServerTLS(certs / "collector.pem", certs / "collector.key")))
    port = collector.start()
    address = f"127.0.0.1:{port}"
    say(f"      listening on {address}")

    say("[2/4] agent for this machine")
    demo_log = root / "demo-app.log"
    demo_log.touch()
    agent = Agent(
        AgentSettings(collectors=(address,), spool_dir=root / "agent", token=token, name=os.uname().nodename,
                      labels={"site": "local", "role": "demo-host"}, log_files=(str(demo_log),), tls=agent_tls),
        samplers=[HostSampler()],
        classify=classify_event,
    )
    agent.start()

    say(f"[3/4] {args.devices} simulated devices (label simulated=true)")
    fleet = build_fleet(collectors=[address], token=token, devices=args.devices, state_dir=root / "simulated",
                        incident_every_s=2400.0, first_incident_s=90.0, classify=classify_event, name_prefix="demo",
                        tls=agent_tls)
    fleet.start()

    dashboard = None
    exe = guide.fleetscope_command()
    if args.no_dashboard:
        say("[4/4] dashboard: skipped (--no-dashboard)")
    elif _dashboard_available():
        try:
            dashboard, dashboard_url, moved = guide.start_dashboard(db_url, args.dashboard_port, root / "dashboard.log")
            say(f"[4/4] dashboard: {dashboard_url}" + (f"  ({moved})" if moved else ""))
        except guide.DashboardFailed as exc:
            say(f"[4/4] dashboard: FAILED: {exc}")
    else:
        say("[4/4] dashboard: not installed (pip install 'fleetscope[dashboard]')")

    say(f"""
fleetscope is running. In another terminal:
{guide.hints_text(exe=exe, db_url=db_url, device=agent.settings.name, demo_log=demo_log,
                  latency_device=fleet.agents[-1].settings.name if fleet.agents else None)}
{guide.join_text(exe=exe, address=address, token_file=guide.write_token_file(root, token), root=root,
                 tls_ca=agent_tls.ca if agent_tls is not None else None)}
{"Stopping after " + str(int(args.duration)) + " s." if args.duration else "Ctrl-C stops everything."}
""")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    watcher = threading.Thread(target=wait_progress, args=(fleet, args.duration), daemon=True)
    watcher.start()
    stop.wait(args.duration)

    say("stopping: agents flush their spools, the collector acknowledges what it has...")
    agent.stop()
    fleet.stop()
    if dashboard is not None:
        dashboard.terminate()
        try:
            dashboard.wait(10)
        except subprocess.TimeoutExpired:
            dashboard.kill()
    collector.stop()
    time.sleep(0.1)
    return _summary(db_url)


def _summary(db_url: str) -> int:
    from fleetscope.collector import query

    engine = query.open_database(db_url)
    now = time.time_ns()
    with query.session_scope(engine) as session:
        devices = query.list_devices(session=session, now_ns=now)
        counts = query.count_samples(session=session)
        incidents = query.search_incidents(session=session, since_ns=0, until_ns=now + 1)
    engine.dispose()
    print(f"stored: {len(devices)} devices, {counts['host']} host samples, {counts['gpu']} GPU samples, "
          f"{len(incidents)} incidents in {db_url}")
    return 0 if devices and counts["host"] else 1
