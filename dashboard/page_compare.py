"""Compare: how does my model do on the Jetson against the server?

A group is any mix of ready-made selectors (a model, a GPU, a kind, a label, single devices);
its devices' latency histograms are merged (histograms merge exactly, averages of percentiles
would not), and their GPU readings aggregated over the same window. Normalised views divide
by watts and by GPUs, because a drone and an 8-GPU server are not the same size.

The selection is in the URL, so a copied link reopens the same comparison:
``?a=model: Jetson Orin Nano&b=GPU: NVIDIA A100-SXM4-80GB&op=infer&range=24h`` (one repeated
parameter per group, ``a`` to ``d``, each value one pick; ``view=Per watt`` for a normalised view).

A fleet of more than a few hundred devices does not list every device in each picker (10,000
options cost the browser seconds to draw): the pickers list models, GPUs, kinds and labels, and
the devices found by the search box under each (``device_options``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd
import streamlit as st

from fleetscope.collector.query import DeviceSummary, GroupComparison, comparison_start
from fleetscope.dashboard import charts, data, device_options, fmt, timerange
from fleetscope.proto.vocabulary import DEVICE_KIND_SERVER

if TYPE_CHECKING:
    from streamlit.delta_generator import DeltaGenerator

LETTERS = "ABCD"
URL_KEYS = "abcd"  # ?a=...&a=...&b=...: one repeated parameter per group
NORMALISE = ("Absolute", "Per watt", "Per GPU")
GIB = 1024**3


def _defaults(options: list[str], devices: list[DeviceSummary]) -> list[list[str]]:
    """A Jetson model against a server GPU, when the fleet has both."""
    jetson = next((o for o in options if o.startswith("model: ") and "Jetson" in o), None)
    server_gpus = {g for d in devices if d.kind == DEVICE_KIND_SERVER for g in d.gpus}
    server = next((o for o in options if o.startswith("GPU: ") and o[5:] in server_gpus), None)
    picks = [[p] for p in (jetson, server) if p]
    rest = [o for o in options if o.startswith("model: ") and [o] not in picks]
    while len(picks) < 2 and rest:
        picks.append([rest.pop(0)])
    return picks + [[] for _ in range(4 - len(picks))]


def _group_label(picks: list[str]) -> str:
    first = picks[0].split(": ", 1)[-1]
    return first + (f" +{len(picks) - 1}" if len(picks) > 1 else "")


def _pickers(
    options: list[str], devices: list[DeviceSummary], groups_map: dict[str, list[str]], n: int
) -> tuple[dict[str, list[str]], dict[str, str], list[list[str]]]:
    """Groups by letter (what charts show), what each letter stands for (what tables show), and
    each group's picks (what the URL keeps); ``groups_map`` is ``device_groups(devices)``."""
    defaults = _defaults(options, devices)
    listed = device_options.every_device_listed(options)
    cols = st.columns(n)
    out: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    all_picks: list[list[str]] = []
    for i in range(n):
        key = f"keep_cmp_group_{i}"
        find_key = f"keep_cmp_find_{i}"
        if key not in st.session_state:
            st.session_state[key] = [d for d in defaults[i] if d in options]
        if listed:
            shown, placeholder = options, "models, GPUs, labels, devices…"
        else:
            # Read before the search box is drawn (below the picker): what was typed last run.
            shown = device_options.shown_options(
                options, picked=st.session_state[key], search=st.session_state.get(find_key, "")
            )
            placeholder = "models, GPUs, labels… (devices: find them below)"
        picks = cols[i].multiselect(f"Group {LETTERS[i]}", shown, key=key, placeholder=placeholder)
        if not listed:
            _find_box(cols[i], find_key, options)
        all_picks.append(list(picks))
        members = sorted({m for p in picks for m in groups_map.get(p, [])})
        if picks and members:
            out[LETTERS[i]] = members
            names[LETTERS[i]] = f"{LETTERS[i]} · {_group_label(picks)}"
            cols[i].caption(
                f"{len(members)} device{'s' if len(members) != 1 else ''}: {', '.join(members[:6])}"
                + (" …" if len(members) > 6 else "")
            )
    return out, names, all_picks


def _find_box(col: DeltaGenerator, find_key: str, options: list[str]) -> None:
    """A fleet too large to list every device in a picker: devices are found by part of their
    name, and the matches join the picker's list above."""
    search = col.text_input(
        "Find devices", key=find_key, placeholder="part of a device name", label_visibility="collapsed"
    )
    if search.strip():
        found = device_options.matching_devices(options, search)
        if not found:
            col.caption(f"No device name contains “{search.strip()}”.")
        elif len(found) > device_options.FOUND_AT_MOST:
            col.caption(
                f"{len(found)} devices match; the first {device_options.FOUND_AT_MOST} are listed in the picker. "
                "Type more of the name, or pick a model, GPU or label instead."
            )
        else:
            col.caption(f"{len(found)} device{'s' if len(found) != 1 else ''} listed in the picker above.")


def _from_url(options: list[str]) -> None:
    """Seed the pickers from a link: when the URL's selection is not the one this page last wrote
    (a link was opened, or edited by hand), it wins over what the session remembers."""
    wanted = [list(st.query_params.get_all(k)) for k in URL_KEYS]
    view = st.query_params.get("view")
    state = (tuple(tuple(g) for g in wanted), st.query_params.get("op"), view)
    if state == st.session_state.get("_cmp_from_url"):
        return
    st.session_state["_cmp_from_url"] = state
    if view in NORMALISE:
        st.session_state["keep_cmp_norm"] = view
    if st.query_params.get("op"):
        st.session_state["keep_cmp_op"] = st.query_params["op"]
    if not any(wanted):
        return
    known = set(options)
    unknown = [v for g in wanted for v in g if v not in known]
    if unknown:
        st.warning(f"Not in this fleet any more, left out: {', '.join(unknown)}", icon=":material/search_off:")
    for i, picks in enumerate(wanted):
        st.session_state[f"keep_cmp_group_{i}"] = [v for v in picks if v in known]
    used = max(i for i, g in enumerate(wanted) if g) + 1
    st.session_state["keep_cmp_n"] = max(2, used)


def _to_url(picks: list[list[str]], op: str | None, view: str) -> None:
    """Write the selection into the URL (and remember it, so the next run knows it is ours)."""
    for i, k in enumerate(URL_KEYS):
        if i < len(picks) and picks[i]:
            st.query_params[k] = picks[i]
        elif k in st.query_params:
            del st.query_params[k]
    for k, v in (("op", op), ("view", None if view == NORMALISE[0] else view)):
        if v:
            st.query_params[k] = v
        elif k in st.query_params:
            del st.query_params[k]
    st.session_state["_cmp_from_url"] = (
        tuple(tuple(picks[i]) if i < len(picks) else () for i in range(len(URL_KEYS))), op, view if view != NORMALISE[0] else None
    )


def _table(results: list[GroupComparison], names: dict[str, str]) -> pd.DataFrame:
    rows: dict[str, dict[str, str]] = {}

    def put(metric: str, group: str, value: str) -> None:
        rows.setdefault(metric, {})[group] = value

    for r in results:
        lat = r.latency
        g = names.get(r.group, r.group)
        put("Devices", g, str(len(r.devices)))
        put("GPUs", g, str(r.gpu_count))
        put("Inferences timed", g, f"{lat.count:,}" if lat else fmt.MISSING)
        put("Latency p50", g, fmt.ms(lat.p50_ms) if lat else fmt.MISSING)
        put("Latency p90", g, fmt.ms(lat.p90_ms) if lat else fmt.MISSING)
        put("Latency p99", g, fmt.ms(lat.p99_ms) if lat else fmt.MISSING)
        put("Latency mean", g, fmt.ms(lat.mean_ms) if lat else fmt.MISSING)
        put("Errors", g, f"{lat.errors:,}" if lat else fmt.MISSING)
        put("Throughput (all devices)", g, fmt.rate(lat.qps, "inferences/s") if lat else fmt.MISSING)
        put("Throughput per GPU", g, fmt.rate(r.qps_per_gpu, "inferences/s"))
        put("Throughput per watt", g, fmt.rate(r.qps_per_watt, "inferences/J"))
        put("Energy per inference", g, fmt.joules(r.energy_per_inference_j))
        put("GPU power per device", g, fmt.watts(r.power_per_device_w))
        put("GPU power per GPU", g, fmt.watts(r.power_per_gpu_w))
        put("GPU energy (window)", g, fmt.joules(r.energy_j))
        put("GPU utilisation", g, fmt.pct(r.util_avg))
        put(
            "GPU memory used per GPU",
            g,
            fmt.used_of(r.memory_used_per_gpu_bytes, r.memory_total_per_gpu_bytes),
        )
        put("GPU temperature (mean / max)", g, f"{fmt.celsius(r.temp_avg_c)} / {fmt.celsius(r.temp_max_c)}")
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.name = "Metric"
    return df.reset_index()


def _bars(results: list[GroupComparison], normalise: str) -> None:
    lat_rows = [
        (p, r.group, v)
        for r in results
        if r.latency
        for p, v in (("p50", r.latency.p50_ms), ("p90", r.latency.p90_ms), ("p99", r.latency.p99_ms))
        if v is not None
    ]
    if normalise == "Per watt":
        tput = [("throughput", r.group, r.qps_per_watt) for r in results]
        t_title, t_unit = "Throughput per watt", "inferences/J"
        power = [("power", r.group, r.power_per_device_w) for r in results]
    elif normalise == "Per GPU":
        tput = [("throughput", r.group, r.qps_per_gpu) for r in results]
        t_title, t_unit = "Throughput per GPU", "inferences/s"
        power = [("power", r.group, r.power_per_gpu_w) for r in results]
    else:
        tput = [("throughput", r.group, r.latency.qps if r.latency else None) for r in results]
        t_title, t_unit = "Throughput, all devices", "inferences/s"
        power = [("power", r.group, r.power_per_device_w) for r in results]
    energy = [("energy", r.group, r.energy_per_inference_j) for r in results]
    c = st.columns(4)
    specs = [
        (lat_rows, "Latency percentiles (merged histograms)", "ms"),
        ([t for t in tput if t[2] is not None], t_title, t_unit),
        (
            [p for p in power if p[2] is not None],
            "GPU power " + ("per GPU" if normalise == "Per GPU" else "per device"),
            "W",
        ),
        ([e for e in energy if e[2] is not None], "Energy per inference", "J"),
    ]
    for i, (rows, title, unit) in enumerate(specs):
        with c[i]:
            if not rows:
                st.caption(f"{title}: no data")
                continue
            df = pd.DataFrame(rows, columns=["what", "group", "value"])
            if i == 0:
                spec = charts.grouped_bars(df, x="what", value="value", group="group", title=title, unit=unit)
            else:
                spec = charts.bars(df, group="group", value="value", title=title, unit=unit)
            charts.show(spec, key=f"c_cmp_{i}")


def _latency_over_time(results: list[GroupComparison], op: str, tr: timerange.TimeRange) -> None:
    rows = [
        (float(t // 10**6), r.group, p)
        for r in results
        if r.latency_series
        for t, p in zip(r.latency_series.ts_ns, r.latency_series.p99_ms)
        if p is not None
    ]
    if not rows:
        return
    df = pd.DataFrame(rows, columns=["t", "series", "value"])
    charts.show(
        charts.time_chart(
            df,
            title=f"{op}: p99 latency per group",
            unit="ms",
            domain=(comparison_start(tr.since_ns, tr.until_ns) // 10**6, tr.until_ns // 10**6),
            number_format=".2f",
        ),
        key="c_cmp_lat",
    )


def _benchmarks(groups: dict[str, list[str]], tr: timerange.TimeRange) -> None:
    st.subheader("Benchmark records")
    members = sorted({m for ms in groups.values() for m in ms})
    records = data.benchmarks(data.url(), tuple(members), tr.since_ns, tr.until_ns)
    if not records:
        st.caption(
            "No trtexec performance summaries from these devices in this range. An agent that follows a log "
            "with trtexec output (`--log-file`) records each run's summary here."
        )
        return
    of = {m: ", ".join(g for g, ms in groups.items() if m in ms) for m in members}
    df = pd.DataFrame(
        [
            {
                "Group": of.get(r.device, ""),
                "Device": r.device,
                "When": fmt.when(r.ts_ns),
                "GPU": r.device_name or fmt.MISSING,
                "Throughput": fmt.rate(r.throughput_qps, "qps"),
                "Latency mean": fmt.ms(r.latency_mean_ms),
                "Latency p99": fmt.ms(r.latency_p99_ms),
                "GPU compute mean": fmt.ms(r.gpu_compute_mean_ms),
                "Precision": r.precision or fmt.MISSING,
                "Batch": r.batch_size if r.batch_size is not None else fmt.MISSING,
            }
            for r in records
        ]
    )
    st.dataframe(df, hide_index=True, width="stretch", key="cmp_bench")


def render() -> None:
    st.title("Compare")
    status = data.status(data.url())
    if not status.ok or status.devices == 0:
        st.info(status.message)
        return
    now = timerange.now_ns()
    to_pick = data.devices_to_pick(data.url(), now)
    devices = to_pick.devices
    options = list(to_pick.groups)
    _from_url(options)
    top = st.columns([2, 1, 2])
    with top[0]:
        tr = timerange.picker("keep_cmp_range", default="24h")
    n = top[1].selectbox("Groups", [2, 3, 4], key="keep_cmp_n")
    st.session_state.setdefault("keep_cmp_norm", "Absolute")
    normalise = top[2].segmented_control("View", NORMALISE, key="keep_cmp_norm") or "Absolute"
    groups, names, picks = _pickers(options, devices, to_pick.groups, n)
    if not groups:
        _to_url(picks, None, normalise)
        st.info("Pick what to compare: a Jetson model in one group and a server GPU in the other, say.")
        return
    asked = tuple((g, tuple(m)) for g, m in groups.items())
    # The operations timed and the comparison with the one on view (or the most timed) come
    # from one call whose reads run side by side.
    comparison = data.comparison(data.url(), asked, tr.since_ns, tr.until_ns, st.session_state.get("keep_cmp_op"))
    ops, op, results = comparison.operations, comparison.operation, comparison.groups
    if ops:
        st.session_state["keep_cmp_op"] = op
        st.selectbox("Operation (latency histograms from the SDK)", ops, key="keep_cmp_op")  # a change reruns
    else:
        st.caption(
            "These devices timed no operations in this range; latency and throughput need the SDK's "
            "`sdk.latency(...)` in the program."
        )
    _to_url(picks, op, normalise)
    start = comparison_start(tr.since_ns, tr.until_ns)
    # The window starts on a whole chart bucket (an hour, a day): say so where that moved it.
    window = tr.label if start == tr.since_ns else f"{tr.label}, from {fmt.when(start, seconds=False)}"
    st.caption(
        f"{window} · energy per inference = GPU power ÷ throughput · throughput counts only the time each "
        "device was measuring"
    )
    _bars(results, normalise)
    table = _table(results, names)
    st.dataframe(table, hide_index=True, width="stretch", key="cmp_table", height=38 + 35 * len(table))
    if op:
        _latency_over_time(results, op, tr)
    _benchmarks(groups, tr)
