"""``fleetscope scan FILE...``: the offline scanner's subcommand.

Without ``--db`` it only reads: a table (``file:line  kind  severity  title``) or, with
``--json``, one JSON document holding every finding's facts. With ``--db URL --device NAME`` it
imports the findings as incidents of that device, so ``fleetscope incidents`` shows what
happened before the agent was installed.

The command lives in the router because it joins two components: the scanning is the agent's
(``fleetscope.agent.tools.scan``, standard library only) and the import is the collector's
(``fleetscope.collector.ingest.scan_import``). Only the ``--db`` path imports the collector and
SQLAlchemy (the collector extra), so scanning works on a drone with the agent alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from fleetscope.proto.vocabulary import (
    KIND_CUDA_OOM,
    KIND_GPU_XID,
    KIND_HOST_OOM,
    KIND_JETSON_MEMORY,
    KIND_MEMORY_ALLOC_FAILURE,
    KIND_TENSORRT_ERROR,
    KIND_TRT_BENCHMARK,
)

KINDS = (
    KIND_CUDA_OOM,
    KIND_HOST_OOM,
    KIND_JETSON_MEMORY,
    KIND_MEMORY_ALLOC_FAILURE,
    KIND_GPU_XID,
    KIND_TENSORRT_ERROR,
    KIND_TRT_BENCHMARK,
)

_DESCRIPTION = """\
Find incidents (CUDA and host OOM, Xid, Jetson memory, TensorRT errors and benchmarks) in log
files with the classifiers the agent runs. Lines are first grouped into events (a Python
traceback, a kernel OOM burst, a trtexec summary, a kubectl state block are one event each;
see fleetscope.agent.logs.grouping for the exact rules). Files starting
with the gzip magic bytes are decompressed on the fly. An unreadable file is reported on stderr
and the others are still scanned (exit status 1)."""

_EPILOG = """\
examples:
  fleetscope scan /var/log/kern.log /var/log/kern.log.2.gz
  fleetscope scan --json --kind cuda_oom train-*.log | jq '.files[].findings[].facts'
  fleetscope scan --db sqlite:///fleetscope-data/fleetscope.db --device drone-7 old/*.log
    (import: creates the device if needed, kind other, label imported=true; importing the same
     files again adds nothing)"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "scan",
        help="find incidents in existing log files (offline), optionally import them",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="log files to scan (plain text or gzip)")
    p.add_argument("--json", action="store_true", help="print one JSON document (for jq) instead of a table")
    p.add_argument(
        "--kind",
        action="append",
        choices=KINDS,
        metavar="KIND",
        help=f"only findings of this kind (repeatable): {', '.join(KINDS)}",
    )
    p.add_argument(
        "--db",
        metavar="URL",
        help="import the findings as incidents into this database: sqlite:///PATH or postgresql+psycopg://... "
        "(needs the collector extra and --device)",
    )
    p.add_argument(
        "--device",
        metavar="NAME",
        help="the device imported incidents belong to; created (kind other, label imported=true) if missing",
    )
    p.add_argument(
        "--progress",
        action="store_true",
        help="report bytes read on stderr every 50 MB (default: only when stderr is a terminal)",
    )
    p.set_defaults(func=run_scan)


def _progress_line(path: str, done: int, total: int) -> None:
    pct = f" ({100 * done / total:.0f}%)" if total else ""
    print(f"scan: {path}: {done / 1e6:.0f} MB of {total / 1e6:.0f} MB read{pct}", file=sys.stderr, flush=True)


def run_scan(args: argparse.Namespace) -> int:
    from fleetscope.agent.tools.scan import scan_files

    if (args.db is None) != (args.device is None):
        print("fleetscope scan: --db and --device go together (import needs both)", file=sys.stderr)
        return 2
    if args.db is not None:
        # Check the extra before reading gigabytes of logs, not after.
        from fleetscope.cli.extras import require

        require("collector", "sqlalchemy")
    show_progress = args.progress or sys.stderr.isatty()
    results = scan_files(args.files, progress=_progress_line if show_progress else None)
    if args.kind:
        wanted = set(args.kind)
        results = [replace(r, findings=tuple(f for f in r.findings if f.kind in wanted)) for r in results]
    for r in results:
        if r.error:
            print(f"fleetscope scan: cannot read {r.path}: {r.error}", file=sys.stderr)
    status = 1 if any(r.error for r in results) else 0
    if args.db is not None:
        return max(status, _import(args, results))
    if args.json:
        json.dump(
            {"files": [_file_doc(r) for r in results], "findings": sum(len(r.findings) for r in results)},
            sys.stdout,
            indent=2,
            default=str,
        )
        sys.stdout.write("\n")
    else:
        _print_table(results)
    return status


def _fields(result: Any) -> dict[str, Any]:
    return {k: getattr(result, k) for k in result.__dataclass_fields__}


def _file_doc(r: Any) -> dict[str, Any]:
    doc = _fields(r)
    doc["findings"] = [asdict(f) for f in r.findings]
    return doc


def _print_table(results: Sequence[Any]) -> None:
    rows = [[f"{r.path}:{f.line}", f.kind, f.severity, f.title[:120]] for r in results for f in r.findings]
    readable = sum(1 for r in results if not r.error)
    if not rows:
        print(f"no incidents found in {readable} file(s)")
        return
    headers = ["FILE:LINE", "KIND", "SEVERITY", "TITLE"]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    print(f"\n{len(rows)} finding(s) in {readable} file(s)")


def _import(args: argparse.Namespace, results: Sequence[Any]) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from fleetscope.collector.errors import StoreUnavailable
    from fleetscope.collector.ingest.scan_import import import_scan_results
    from fleetscope.collector.storage.engine import make_engine

    try:
        engine = make_engine(args.db)  # creates the schema: importing into a new database is allowed
    except (StoreUnavailable, SQLAlchemyError, ValueError, OSError) as exc:  # bad URL, folder not creatable
        print(f"fleetscope scan: cannot open database {args.db}: {exc}", file=sys.stderr)
        return 1
    try:
        outcome = import_scan_results(engine, device=args.device, results=results)
    except (StoreUnavailable, SQLAlchemyError) as exc:
        print(f"fleetscope scan: import into {args.db} failed: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    if args.json:
        doc = {
            **asdict(outcome),
            "files": [{"path": r.path, "findings": len(r.findings), "error": r.error} for r in results],
        }
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        made = " (device created, label imported=true)" if outcome.created_device else ""
        print(
            f"imported {outcome.inserted} incident(s) into device {outcome.device!r}{made}; "
            f"{outcome.already_present} were imported before"
        )
    return 0
