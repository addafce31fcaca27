"""The Device page's Hardware tab: what nvitop and jtop users look at, from the query API.

A GPU server: the compute processes on each GPU with their GPU memory (heaviest first), then a
table with one row per GPU of what NVML reports besides the charted readings: ECC counts,
retired pages and remapped rows, the PCIe link and its throughput, fan, and power against its
limit. A Jetson: nvpmodel and jetson_clocks, EMC load, every engine (NVENC, NVDEC, VIC, DLA...),
every power rail and thermal sensor. Both as of the end of the chosen range.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from fleetscope.collector.query import GpuHardware, JetsonView
from fleetscope.dashboard import data, fmt

MISSING = fmt.MISSING


def _num(x: float | None) -> str:
    return MISSING if x is None else f"{int(x):,}"


def _link(g: GpuHardware) -> str:
    if g.pcie_gen is None and g.pcie_width is None:
        return MISSING
    return f"Gen{g.pcie_gen or '?'} x{g.pcie_width or '?'}"


def _power(g: GpuHardware) -> str:
    if g.power_w is None and g.power_limit_w is None:
        return MISSING
    return f"{fmt.watts(g.power_w)} / {fmt.watts(g.power_limit_w)}"


def gpu_tables(gpus: list[GpuHardware]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(processes, per-GPU state) as the tab shows them."""
    procs = pd.DataFrame(
        [
            {
                "GPU": g.gpu_index,
                "PID": p.pid,
                "Process": p.name,
                "GPU memory": fmt.bytes_(p.gpu_memory_bytes),
                "Share of GPU": fmt.pct(100 * p.gpu_memory_bytes / g.memory_total_bytes)
                if p.gpu_memory_bytes is not None and g.memory_total_bytes
                else MISSING,
            }
            for g in gpus
            for p in (g.processes or ())
        ],
        columns=["GPU", "PID", "Process", "GPU memory", "Share of GPU"],
    )
    state = pd.DataFrame(
        [
            {
                "GPU": g.gpu_index,
                "Memory": fmt.used_of(g.memory_used_bytes, g.memory_total_bytes),
                "Processes": MISSING if g.processes is None else str(len(g.processes)),
                "Power / limit": _power(g),
                "Fan": fmt.pct(g.fan_percent),
                "PCIe link": _link(g),
                "PCIe rx": fmt.rate(None if g.pcie_rx_bytes_per_s is None else g.pcie_rx_bytes_per_s / 1024**2, " MiB/s"),
                "PCIe tx": fmt.rate(None if g.pcie_tx_bytes_per_s is None else g.pcie_tx_bytes_per_s / 1024**2, " MiB/s"),
                "ECC corrected (volatile / total)": f"{_num(g.ecc_volatile_corrected)} / {_num(g.ecc_aggregate_corrected)}",
                "ECC uncorrected (volatile / total)": f"{_num(g.ecc_volatile_uncorrected)} / {_num(g.ecc_aggregate_uncorrected)}",
                "Retired pages": _num(g.retired_pages),
                "Remapped rows": _num(g.remapped_rows),
            }
            for g in gpus
        ]
    )
    return procs, state


def jetson_tables(v: JetsonView) -> tuple[dict[str, str], pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(board facts, engines, rails, sensors) as the tab shows them."""
    facts = {
        "nvpmodel": MISSING if v.nvpmodel_id is None else f"{v.nvpmodel_id}" + (f" ({v.nvpmodel_mode})" if v.nvpmodel_mode else ""),
        "jetson_clocks": MISSING if v.jetson_clocks is None else ("on" if v.jetson_clocks else "off"),
        "EMC load": fmt.pct(v.emc_load_percent),
        "EMC frequency": fmt.mhz(v.emc_mhz),
        "Fan": fmt.pct(v.fan_percent),
    }
    engines = pd.DataFrame(
        [{"Engine": e.name, "State": "on" if e.value > 0 else "off", "Frequency": fmt.mhz(e.value) if e.value > 0 else MISSING}
         for e in v.engines],
        columns=["Engine", "State", "Frequency"],
    )
    rails = pd.DataFrame(
        [{"Rail": r.name, "Power": f"{r.value:,.0f} mW", "Average": MISSING if r.average is None else f"{r.average:,.0f} mW"}
         for r in v.rails],
        columns=["Rail", "Power", "Average"],
    )
    temps = pd.DataFrame([{"Sensor": t.name, "Temperature": fmt.celsius(t.value)} for t in v.temps],
                         columns=["Sensor", "Temperature"])
    return facts, engines, rails, temps


def render(device: str, until_ns: int, now_ns: int) -> None:
    gpus = data.gpu_hardware(data.url(), device, until_ns)
    board = data.jetson_view(data.url(), device, until_ns)
    if not gpus and board is None:
        st.info("No hardware readings up to the end of this range.")
        return
    if board is not None:
        facts, engines, rails, temps = jetson_tables(board)
        st.subheader("Jetson board")
        st.caption(f"As of {fmt.when(board.ts_ns)} ({fmt.ago(board.ts_ns, now_ns)})")
        cols = st.columns(len(facts))
        for c, (label, value) in zip(cols, facts.items()):
            c.metric(label, value)
        left, mid, right = st.columns(3)
        with left:
            st.markdown("**Engines**")
            st.dataframe(engines, hide_index=True, width="stretch", key="hw_engines")
        with mid:
            st.markdown("**Power rails**")
            st.dataframe(rails, hide_index=True, width="stretch", key="hw_rails")
        with right:
            st.markdown("**Thermal sensors**")
            st.dataframe(temps, hide_index=True, width="stretch", key="hw_temps")
    if gpus:
        procs, state = gpu_tables(gpus)
        newest = max(max(g.state_ts_ns or 0, g.sample_ts_ns or 0) for g in gpus)
        st.subheader("GPUs")
        st.caption(f"As of {fmt.when(newest)} ({fmt.ago(newest, now_ns)}); — : not reported by this GPU")
        st.dataframe(state, hide_index=True, width="stretch", key="hw_gpus")
        st.markdown("**Compute processes**")
        if procs.empty:
            st.caption("No compute processes reported (none running, or the driver does not list them, as on a Jetson).")
        else:
            st.dataframe(procs, hide_index=True, width="stretch", height=min(38 + 35 * len(procs), 420), key="hw_procs")
