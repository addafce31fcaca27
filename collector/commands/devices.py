"""``fleetscope devices``: every registered device with its state, labels and delivery counters."""

from __future__ import annotations

import argparse
import time
from typing import Any

from fleetscope.cli.args import format_ago, label
from fleetscope.cli.terminal import visible
from fleetscope.collector.commands.output import (
    OUTPUT,
    db_arg,
    needs_collector,
    open_session,
    print_empty,
    print_json,
    table,
)


def register(sub: Any) -> None:
    p = sub.add_parser("devices", help="list registered devices", description="Every device that registered, with its state.")
    db_arg(p)
    p.add_argument("--label", type=label, action="append", default=[], metavar="KEY=VALUE",
                   help="only devices with this label (repeat: every key must match, any value of one key will do)")
    p.set_defaults(func=needs_collector(run_devices))


def run_devices(args: argparse.Namespace) -> int:
    from fleetscope.collector import query
    from fleetscope.collector.query.devices import device_states, labels_match

    now = time.time_ns()
    wanted = [f"{k}={v}" for k, v in args.label]  # keys must all match; several values of one key: any
    with open_session(args.db) as session:
        everyone = query.list_devices(session=session, now_ns=now)
    devices = [d for d in everyone if labels_match(d.labels, wanted)]
    states = device_states(everyone)
    if args.json:
        print_json({"devices": devices})
        return 0
    headers = ["DEVICE", "KIND", "STATE", "LAST SEEN", "GPUS", "LABELS", "BATCHES", "REJECTED", "DROPPED", "SPOOLED"]
    if not devices:
        if not everyone:
            print_empty("no devices yet: start an agent with 'fleetscope agent --collector HOST:PORT --name NAME'", headers)
        else:
            print_empty(_label_miss(everyone, wanted), headers)
        return 0
    rows = []
    for d in devices:
        c = d.counters
        st = states[d.agent_id]
        rows.append([
            d.name, d.kind, "OFFLINE" if st == "offline" else st, format_ago(d.last_seen_ns, now), str(d.gpu_count),
            ",".join(f"{k}={v}" for k, v in sorted(d.labels.items())) or "-",
            str(d.batches_stored), str(d.batches_rejected),
            str(c.get("dropped_samples", 0)), str(c.get("spool_batches", 0)),
        ])
    table(headers, rows)
    if not OUTPUT["csv"]:
        names = [d.name for d in devices]
        for name in sorted({n for n in names if names.count(n) > 1}):
            ids = ", ".join(d.agent_id for d in devices if d.name == name)
            print(f"{visible(name)}: {names.count(name)} installs (agent ids {visible(ids)}): --device {visible(name)} "
                  "reads them all as one history; --device AGENT_ID reads one")
    return 0


def _label_miss(everyone: list[Any], wanted: list[str]) -> str:
    """Which --label emptied the device list, with the values that key has."""
    from fleetscope.collector.query.devices import labels_match

    for i in range(len(wanted)):
        if not [d for d in everyone if labels_match(d.labels, wanted[: i + 1])]:
            key = wanted[i].partition("=")[0]
            values = sorted({d.labels[key] for d in everyone if key in d.labels})
            known = f"values of {key!r}: {', '.join(values)}" if values else f"no device has a label {key!r}"
            before = f" with {' '.join('--label ' + w for w in wanted[:i])}" if i else ""
            return visible(f"no devices: --label {wanted[i]} matched none of the {len(everyone)} devices{before} ({known})")
    return "no devices match"


