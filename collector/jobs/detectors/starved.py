"""GPU starved: a GPU with a job on it (mean utilisation above zero) but at most
``starved_util_percent`` busy over ``starved_window_s``, while the program waits on its data (the
SDK's ``train_steps`` data-wait share, metric ``{name}.data_wait_ratio``, at least
``starved_wait_ratio``) or the host CPU averages at least ``starved_cpu_percent``.

New samples are read incrementally (one read of the tail and the chunks for all devices,
``read_new_sample_sums``), summed per device and quarter of the window and added to the sums kept
in the progress state, so a pass never re-reads the window. The data-wait metric is summed in
the database (one GROUP BY, ``read_new_sums``), read by name (``{name}.data_wait_ratio`` for
each ``{name}.data_wait`` operation the device times, and ``train.data_wait_ratio``), which the
(device, name, ts) index serves.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func

from fleetscope.collector.jobs.detectors import hints as hint_math
from fleetscope.collector.jobs.detectors._common import (
    COUNT,
    NS,
    SUM,
    Changes,
    Open,
    PassContext,
    Refresh,
    Resolve,
    add_sums,
    read_new_sample_sums,
    read_new_sums,
    sum_pairs,
)
from fleetscope.collector.storage.incident_lifecycle import DerivedKey
from fleetscope.collector.storage.schema import metric_points
from fleetscope.proto.vocabulary import DEVICE_KIND_JETSON, KIND_GPU_STARVED, SEVERITY_WARNING

NAME = KIND_GPU_STARVED
WAIT_SUFFIX = ".data_wait_ratio"


def detect(ctx: PassContext) -> Changes:
    ch = Changes(NAME)
    s = ctx.settings
    window_ns = int(s.starved_window_s * NS)
    sub_ns = max(1, window_ns // 4)
    gpu_sums, gpu_marks = read_new_sample_sums(
        ctx,
        NAME,
        "gpu",
        ["gpu_index"],
        ["util_gpu_percent"],
        _mean_sums("util_gpu_percent"),
        sub_ns,
        present=["util_gpu_percent"],
        first_lookback_s=s.starved_window_s,
    )
    ids = list(gpu_marks)
    host_sums, host_marks = read_new_sample_sums(
        ctx,
        NAME,
        "host",
        [],
        ["cpu_percent"],
        _mean_sums("cpu_percent"),
        sub_ns,
        key="host",
        device_ids=ids,
        present=["cpu_percent"],
        first_lookback_s=s.starved_window_s,
    )
    wait_names = {"train" + WAIT_SUFFIX}
    for d in ids:
        for op in ctx.operations(d):
            if op.endswith(".data_wait"):
                wait_names.add(op[: -len(".data_wait")] + WAIT_SUFFIX)
    wait_sums, wait_marks = read_new_sums(
        ctx,
        NAME,
        metric_points,
        [],
        lambda c, x: [func.count(c.value), func.sum(c.value)],
        sub_ns,
        key="wait",
        device_ids=ids,
        where=[metric_points.c.name.in_(sorted(wait_names))],
        first_lookback_s=s.starved_window_s,
    )
    keep_from = ctx.now_ns - window_ns - sub_ns
    for d in gpu_marks:
        _, state = ctx.mark(NAME, d)
        series: dict[str, list] = state.get("series", {})
        for _dev, gpu, start, n, total, _newest in gpu_sums.get(d, []):
            add_sums(series.setdefault(f"g{gpu}", []), start, (n, total))
        for _dev, start, n, total, _newest in host_sums.get(d, []):
            add_sums(series.setdefault("cpu", []), start, (n, total))
        for _dev, start, n, total, _newest in wait_sums.get(d, []):
            add_sums(series.setdefault("wait", []), start, (n, total))
        series = {k: [x for x in v if x[0] >= keep_from] for k, v in series.items()}
        series = {k: v for k, v in series.items() if v}
        _judge(ctx, ch, d, series, window_ns, sub_ns)
        ch.set_progress(d, "", gpu_marks[d], {"series": series})
        if d in host_marks:
            ch.set_progress(d, "host", host_marks[d])
        if d in wait_marks:
            ch.set_progress(d, "wait", wait_marks[d])
    return ch


def _mean_sums(col: str) -> Any:
    """n and sum of a reading (the mean over sub-windows), summed by ``read_new_sample_sums``."""
    return lambda v, x: [(COUNT, v[col]), (SUM, v[col])]


def _mean(subs: list | None, lo: int) -> tuple[float | None, int]:
    if not subs:
        return None, 0
    n, total = sum_pairs([x for x in subs if x[0] >= lo])
    return (total / n if n else None), int(n)


def _judge(
    ctx: PassContext, ch: Changes, d: int, series: dict[str, list], window_ns: int, sub_ns: int
) -> None:
    s = ctx.settings
    lo = ctx.now_ns - window_ns
    lo -= lo % sub_ns
    cpu, _ = _mean(series.get("cpu"), lo)
    wait, _ = _mean(series.get("wait"), lo)
    for name, subs in series.items():
        if not name.startswith("g"):
            continue
        gpu = int(name[1:])
        util, n = _mean(subs, lo)
        covered = subs and subs[0][0] <= ctx.now_ns - window_ns * 3 // 4
        key = DerivedKey(d, KIND_GPU_STARVED, gpu)
        cur = ctx.open.get(key)
        if util is None or n < 3 or not covered:
            continue
        waiting = wait is not None and wait >= s.starved_wait_ratio
        # A Jetson's CPU load is shared with everything on the board: only the SDK's data wait counts there.
        saturated = (
            cpu is not None and cpu >= s.starved_cpu_percent and ctx.devices[d].kind != DEVICE_KIND_JETSON
        )
        starved = 0 < util <= s.starved_util_percent and (waiting or saturated)
        facts: dict[str, Any] = {
            "gpu_index": gpu,
            "util_percent": round(util, 1),
            "window_s": s.starved_window_s,
            "data_wait_ratio": None if wait is None else round(wait, 3),
            "cpu_percent": None if cpu is None else round(cpu, 1),
            "cause": "data_wait" if waiting else "cpu_saturated",
        }
        if starved:
            why = (
                f"waiting on data {100 * wait:.0f} % of the time"
                if waiting and wait is not None
                else f"host CPU at {cpu:.0f} %"
            )
            title = f"GPU {gpu} on {ctx.devices[d].name} starved: {util:.0f} % busy, {why}"
            if cur is None:
                own = hint_math.hint(f"GPU {gpu} {util:.0f} % busy while {why}", **facts)
                hints = [own, *hint_math.hints_for(ctx.conn, d, ctx.now_ns, s, exclude=KIND_GPU_STARVED)]
                ch.ops.append(
                    Open(
                        key,
                        ctx.now_ns - window_ns,
                        SEVERITY_WARNING,
                        title,
                        facts,
                        last_seen_ns=ctx.now_ns,
                        hints=hints,
                    )
                )
            else:
                ch.ops.append(Refresh(cur.id, ctx.now_ns, facts=facts, title=title))
        elif cur is not None:
            ch.ops.append(
                Resolve(cur.id, ctx.now_ns, facts=dict(cur.facts, resolved_util_percent=round(util, 1)))
            )
