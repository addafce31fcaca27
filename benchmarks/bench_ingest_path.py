"""The collector's CPU per batch on its ingest thread, stage by stage, for a drone's and a server's batch.

    python benchmarks/bench_ingest_path.py                  # 1 h of bench_peers' fleet, best of 7 passes
    python benchmarks/bench_ingest_path.py --hours 2 --passes 11

The batches are those ``bench_peers.py storage`` sends (compact-v1, 125 s each): a Jetson drone
(one GPU, 250 sample rows a batch) and an 8-GPU server (1,125 rows). Each batch goes through what
the collector's ingest thread does with it, timed per stage and averaged over the batches of a
pass; the best pass is printed (this machine is noisy):

* **unfold**: ``expand_compact``, decompressing the blob and reading its sample sections into arrays;
* **validate**: ``validate_batch``, every rule of the wire contract;
* **prepare**: the writer's ``prepare`` (chunk rows, newest readings, GPU state), as the ingest
  thread runs it;
* **finish**: what the writer's own thread adds before the transaction (the chunks' compression).

Compare two versions by running it from each tree (``PYTHONPATH=<tree with a fleetscope/ package
of links>``), alternated, on an idle machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=_positive, default=1.0, help="fleet time per device (default %(default)s)")
    parser.add_argument("--passes", type=int, default=7, help="passes over the batches; the best is printed (default %(default)s)")
    args = parser.parse_args(argv)
    if args.passes < 1:
        parser.error("--passes must be 1 or more")

    import bench_peers

    from fleetscope.collector.ingest.validation import (
        Limits,
        check_batch_identity,
        expand_compact,
        validate_batch,
    )
    from fleetscope.collector.storage import writer
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    finish = getattr(writer, "_finish", None)  # absent in versions that compressed on the ingest thread
    limits = Limits()
    with tempfile.TemporaryDirectory(prefix="fleetscope-bench-ingest-path-") as tmp:
        print(f"building {args.hours} h of one drone and one 8-GPU server ...", file=sys.stderr)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            bench_peers.build_fleet(2, args.hours, Path(tmp) / "fleet")
        print(f"{'device':<8} {'rows/batch':>10} {'unfold':>8} {'validate':>9} {'prepare':>8} {'finish':>7} {'ingest thread':>14}")
        for path, label in zip(sorted((Path(tmp) / "fleet" / "fs").glob("*.batches")), ("drone", "server")):
            _, payloads = bench_peers._read_batches(path)
            best: list[float] | None = None
            rows = 0
            for _ in range(args.passes):
                spent = [0.0, 0.0, 0.0, 0.0]
                for payload in payloads:
                    batch = pb.Batch.FromString(payload)
                    t0 = time.perf_counter()
                    check_batch_identity(batch, limits)
                    unfolded = expand_compact(batch, limits)
                    t1 = time.perf_counter()
                    try:
                        decoded = validate_batch(batch, limits, sent_on_rows_clock_ns=batch.created_ns, unfolded=unfolded)
                    except TypeError:  # a version before ``unfolded``
                        decoded = validate_batch(batch, limits, sent_on_rows_clock_ns=batch.created_ns)
                    t2 = time.perf_counter()
                    sections = getattr(unfolded, "sections", unfolded)
                    item = writer.WriteItem(batch=batch, device_id=1, agent_id=batch.agent_id, boot_id=batch.boot_id,
                                            seq=batch.seq, received_ns=batch.created_ns, correction_ns=0, clock_skew_ns=0,
                                            clock_step_ns=0, compact_sections=sections, decoded=decoded)
                    prepared = writer._prepare(item, True)
                    t3 = time.perf_counter()
                    if finish is not None:
                        finish(prepared, True)
                    t4 = time.perf_counter()
                    for k, dt in enumerate((t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                        spent[k] += dt
                    rows = decoded.sample_rows
                per_batch = [s / len(payloads) * 1e6 for s in spent]
                best = per_batch if best is None else [min(a, b) for a, b in zip(best, per_batch)]
            assert best is not None
            print(f"{label:<8} {rows:>10,} {best[0]:>6.0f}us {best[1]:>7.0f}us {best[2]:>6.0f}us {best[3]:>5.0f}us "
                  f"{sum(best[:3]):>12.0f}us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
