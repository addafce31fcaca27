"""Time a /metrics/fleet scrape (cache miss: query + render) of N devices x 8 GPUs.

    python benchmarks/bench_fleet_metrics.py [--devices 1000] [--samples 30] [--db URL]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert

from fleetscope.collector import query
from fleetscope.collector.observability.fleet_exposition import render_fleet
from fleetscope.collector.query.latest import latest_readings
from fleetscope.collector.storage.engine import ensure_schema, make_engine
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    HOST_VALUE_COLUMNS,
    Device,
    gpu_samples,
    host_samples,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=30, help="samples per device already stored (table size)")
    ap.add_argument("--db", default=None)
    args = ap.parse_args()
    url = args.db or f"sqlite:///{Path(tempfile.mkdtemp()) / 'bench.db'}"
    engine = make_engine(url, create=True)
    ensure_schema(engine)
    now = time.time_ns()
    with engine.begin() as conn:
        conn.execute(insert(Device), [
            {"agent_id": f"a{i}", "name": f"dev-{i:04d}", "hostname": f"h{i}", "kind": "server", "first_seen_ns": now,
             "last_seen_ns": now, "inventory": {"gpus": [{"index": g, "name": "H100", "uuid": f"GPU-{i}-{g}"} for g in range(8)]}}
            for i in range(args.devices)])  # fmt: skip
        ids = [r[0] for r in conn.execute(Device.__table__.select().with_only_columns(Device.id))]
        for s in range(args.samples):
            ts = now - (args.samples - s) * 10**9
            conn.execute(insert(gpu_samples), [{"device_id": d, "ts_ns": ts, "gpu_index": g, **{c: 50.0 for c in GPU_SAMPLE_COLUMNS}}
                                               for d in ids for g in range(8)])
            conn.execute(insert(host_samples), [{"device_id": d, "ts_ns": ts, **{c: 1.0 for c in HOST_VALUE_COLUMNS}} for d in ids])
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        with query.session_scope(engine) as session:
            readings = latest_readings(session=session, now_ns=time.time_ns())
        body = render_fleet(readings)
        times.append(time.perf_counter() - t0)
    lines = body.count("\n")
    print(f"{args.devices} devices x 8 GPUs, {args.samples} samples each stored ({engine.dialect.name}): "
          f"scrape {min(times) * 1000:.0f} ms best, {sorted(times)[len(times) // 2] * 1000:.0f} ms median; {lines} lines, {len(body) / 1e6:.1f} MB")
    engine.dispose()


if __name__ == "__main__":
    main()
