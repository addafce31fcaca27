"""Alerts: what is firing, pending and silenced now, and what fired before.

An alert is one rule matched for one subject (a device, an incident, an operation); it goes
pending (the condition holds) -> firing (it held for the rule's ``for``) -> resolved, and the
resolved ones are the history. "Silenced" means a silence in force now matches it: it still
changes state, but notifies no one. Selecting an alert shows its facts, its device and incident,
and every notification sent for it with each delivery attempt.

The filters and the open alert are in the URL (``?state=firing&label=site=field&alert=12``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

import pandas as pd
import streamlit as st

from fleetscope.collector.query import AlertRow, labels_match
from fleetscope.dashboard import data, fmt, nav, params, timerange
from fleetscope.proto.vocabulary import ALERT_FIRING, ALERT_PENDING, ALERT_RESOLVED, SEVERITIES

NS = 10**9
VIEWS = ("firing", "pending", "silenced", "history")
STATE_COLORS = {ALERT_FIRING: "#d62728", ALERT_PENDING: "#f2a93b", ALERT_RESOLVED: "#21a366"}
STATE_ICON = {
    ALERT_FIRING: ":red[:material/notifications_active:]",
    ALERT_PENDING: ":orange[:material/hourglass_top:]",
    ALERT_RESOLVED: ":green[:material/check_circle:]",
}
SKIP_FACTS = {"message", "line_prefix", "has_header", "timestamp_style"}


@dataclass(frozen=True)
class Filters:
    views: tuple[str, ...]
    rules: tuple[str, ...]
    devices: tuple[str, ...]
    labels: tuple[str, ...]
    severities: tuple[str, ...]

    def keep(self, a: AlertRow) -> bool:
        return (
            (not self.rules or a.rule in self.rules)
            and (not self.devices or (a.device_name or "") in self.devices)
            and (not self.labels or labels_match(a.labels, self.labels))
            and (not self.severities or a.severity in self.severities)
        )


def view_of(a: AlertRow) -> str:
    """Which section an alert is listed in: silenced wins over firing and pending."""
    if a.state == ALERT_RESOLVED:
        return "history"
    return "silenced" if a.silenced else a.state


def _filters(alerts: Sequence[AlertRow]) -> tuple[timerange.TimeRange, Filters]:
    rules = sorted({a.rule for a in alerts})
    devices = sorted({a.device_name for a in alerts if a.device_name})
    labels = sorted({f"{k}={v}" for a in alerts for k, v in a.labels.items()})
    sevs = [s for s in SEVERITIES if any(a.severity == s for a in alerts)] or list(SEVERITIES)
    # A link may name a value no alert carries now: keep it offered, so the filter shows what it asked.
    rules += [v for v in params.param_list("rule") if v not in rules]
    devices += [v for v in params.param_list("device") if v not in devices]
    labels += [v for v in params.param_list("label") if v not in labels and "=" in v]
    params.init_from_url("alerts_views", "state", VIEWS)
    params.init_from_url("alerts_rules", "rule", rules)
    params.init_from_url("alerts_devices", "device", devices)
    params.init_from_url("alerts_labels", "label", labels)
    params.init_from_url("alerts_sev", "severity", sevs)
    c = st.columns([1.5, 2.6, 1.8, 1.8, 2.4, 1.4])
    with c[0]:
        tr = timerange.picker("alerts_range", default="24h")
    views = c[1].multiselect(
        "Show",
        list(VIEWS),
        key="alerts_views",
        placeholder="all sections",
        format_func=str.capitalize,
    )
    picked_rules = c[2].multiselect("Rule", rules, key="alerts_rules", placeholder="all rules")
    picked_devices = c[3].multiselect("Device", devices, key="alerts_devices", placeholder="all devices")
    picked_labels = c[4].multiselect("Labels", labels, key="alerts_labels", placeholder="site, fleet…")
    picked_sev = c[5].multiselect("Severity", sevs, key="alerts_sev", placeholder="all")
    params.set_param("state", views)
    params.set_param("rule", picked_rules)
    params.set_param("device", picked_devices)
    params.set_param("label", picked_labels)
    params.set_param("severity", picked_sev)
    f = Filters(
        tuple(views) or VIEWS,
        tuple(picked_rules),
        tuple(picked_devices),
        tuple(picked_labels),
        tuple(picked_sev),
    )
    return tr, f


def device_link(name: str | None) -> str | None:
    # Relative to this page, so a dashboard served under a path prefix links right too.
    return f"device?device={quote(name)}" if name else None


def incident_link(incident_id: int | None) -> str | None:
    return f"incidents?incident={incident_id}" if incident_id is not None else None


def _link_columns() -> dict:
    cc = st.column_config
    return {
        "Device": cc.LinkColumn(display_text=r"device=(.*)$", width=130, help="open the device"),
        "Incident": cc.LinkColumn(display_text=r"incident=(\d+)$", width=80, help="open the incident"),
        "Severity": cc.MultiselectColumn(
            options=list(fmt.SEVERITY_COLORS), color=list(fmt.SEVERITY_COLORS.values()), width=90
        ),
        "State": cc.MultiselectColumn(
            options=list(STATE_COLORS), color=list(STATE_COLORS.values()), width=84
        ),
        "Labels": cc.MultiselectColumn(width="large", color="auto"),
    }


def alert_table(alerts: Sequence[AlertRow], now_ns: int, *, history: bool = False) -> pd.DataFrame:
    rows = []
    for a in alerts:
        since = a.firing_ns if a.firing_ns is not None and not history else a.pending_ns
        row = {
            "Since" if not history else "Started": fmt.when(since),
            "For" if not history else "Lasted": fmt.duration(((a.resolved_ns or now_ns) - since) / NS),
            "State": [a.state],
            "Rule": a.rule,
            "Device": device_link(a.device_name),
            "Severity": [a.severity],
            "Summary": a.summary,
            "Incident": incident_link(a.incident_id),
            "Labels": [f"{k}={v}" for k, v in sorted(a.labels.items())],
            "id": a.id,
        }
        if history:
            row["Resolved"] = fmt.when(a.resolved_ns) if a.resolved_ns else fmt.MISSING
        rows.append(row)
    return pd.DataFrame(rows)


def _section(
    title: str, alerts: Sequence[AlertRow], now_ns: int, key: str, empty: str, *, history: bool = False
) -> int | None:
    st.subheader(f"{title} ({len(alerts)})")
    if not alerts:
        st.caption(empty)
        return None
    df = alert_table(alerts, now_ns, history=history)
    order = (
        ["Started", "Resolved", "Lasted", "Rule", "Device", "Severity", "Summary", "Incident", "Labels"]
        if history
        else ["Since", "For", "State", "Rule", "Device", "Severity", "Summary", "Incident", "Labels"]
    )
    if all(a.incident_id is None for a in alerts):  # a column of "None" says nothing
        order.remove("Incident")
    picked = st.dataframe(
        df,
        hide_index=True,
        width="stretch",
        column_order=order,
        column_config=_link_columns(),
        on_select="rerun",
        selection_mode="single-row",
        key=key,
        height=min(38 + 35 * len(df), 420),
    )
    rows = picked.selection.rows if picked else []
    return int(df.iloc[rows[0]]["id"]) if rows else None


def _silences(now_ns: int) -> None:
    found = data.silences(data.url(), now_ns)
    with st.expander(f"Silences in force ({len(found)})", expanded=False):
        if not found:
            st.caption("None. Add one with `fleetscope silence add --rule NAME --device NAME --for 2h`.")
            return
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "Rule": s.rule or "any rule",
                        "Device": s.device or "any device",
                        "Labels": ", ".join(f"{k}={v}" for k, v in sorted(s.labels.items())) or "any",
                        "Expires": f"{fmt.when(s.expires_ns)} (in {fmt.duration((s.expires_ns - now_ns) / NS)})",
                        "By": s.created_by,
                        "Comment": s.comment,
                    }
                    for s in found
                ]
            ),
            hide_index=True,
            width="stretch",
            key="alerts_silences",
        )


def _range_for(start_ns: int, now_ns: int) -> str:
    """The smallest preset range that shows an alert's whole span up to now."""
    age_s = (now_ns - start_ns) / NS * 1.2
    for key, (_label, seconds) in timerange.PRESETS.items():
        if seconds and seconds >= age_s:
            return key
    return "30d"


def _facts(facts: dict) -> pd.DataFrame:
    rows = [
        {"Fact": fmt.fact_label(k), "Value": fmt.fact(k, v)}
        for k, v in sorted(facts.items())
        if k not in SKIP_FACTS and v is not None and v != "" and not isinstance(v, (dict, list))
    ]
    return pd.DataFrame(rows, columns=["Fact", "Value"])


def detail(alert: AlertRow, now_ns: int) -> None:
    st.divider()
    st.subheader(f"{STATE_ICON.get(alert.state, '')} {alert.summary or alert.rule}")
    bits = [f"rule **{alert.rule}**", alert.state, alert.severity, alert.kind]
    if alert.device_name:
        bits.append(f"**{alert.device_name}**")
    if alert.silenced:
        bits.append(":gray[silenced]")
    st.markdown(" · ".join(bits))
    timeline = [f"pending {fmt.when(alert.pending_ns)}"]
    if alert.firing_ns is not None:
        timeline.append(f"firing {fmt.when(alert.firing_ns)}")
    if alert.resolved_ns is not None:
        timeline.append(f"resolved {fmt.when(alert.resolved_ns)}")
    else:
        timeline.append(f"still {alert.state} ({fmt.ago(alert.firing_ns or alert.pending_ns, now_ns)})")
    st.caption(" → ".join(timeline) + f" · last evaluated {fmt.ago(alert.last_eval_ns, now_ns)}")
    c = st.columns([1, 1, 2])
    if alert.device_name:
        c[0].page_link(
            nav.page("device"),
            label=f"Open {alert.device_name}",
            icon=":material/memory:",
            query_params={"device": alert.device_name, "range": _range_for(alert.pending_ns, now_ns)},
        )
    if alert.incident_id is not None:
        c[1].page_link(
            nav.page("incidents"),
            label=f"Open incident #{alert.incident_id}",
            icon=":material/report:",
            query_params={"incident": str(alert.incident_id)},
        )
    if alert.labels:
        c[2].markdown(" ".join(f"`{k}={v}`" for k, v in sorted(alert.labels.items())))
    left, right = st.columns([2, 3])
    with left:
        st.markdown("**Facts**")
        facts = _facts(alert.facts)
        if facts.empty:
            st.caption("This alert carries no facts.")
        else:
            st.dataframe(facts, hide_index=True, width="stretch", key="alert_facts")
    with right:
        st.markdown("**Notifications**")
        _notifications(alert.id)


def _notifications(alert_id: int) -> None:
    found = data.alert_notifications(data.url(), alert_id)
    if not found:
        st.caption("None sent: no notifier for this rule, silenced, or still pending.")
        return
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "Transition": n.transition,
                    "Notifier": n.notifier,
                    "State": n.state,
                    "Attempts": len(n.attempts),
                    "Delivered": fmt.when(n.delivered_ns) if n.delivered_ns else fmt.MISSING,
                    "Last error": n.last_error,
                }
                for n in found
            ]
        ),
        hide_index=True,
        width="stretch",
        key="alert_notifications",
    )
    attempts = [(n, t) for n in found for t in n.attempts]
    if attempts:
        with st.expander(f"Delivery attempts ({len(attempts)})"):
            st.dataframe(
                pd.DataFrame(
                    [
                        {
                            "Time": fmt.when(t.ts_ns),
                            "Notification": f"{n.transition} → {n.notifier}",
                            "Result": "delivered" if t.ok else "failed",
                            "HTTP status": str(t.status) if t.status is not None else "no answer",
                            "Took": fmt.ms(t.duration_ms),
                            "Error": t.error,
                        }
                        for n, t in attempts
                    ]
                ),
                hide_index=True,
                width="stretch",
                key="alert_attempts",
            )


def render() -> None:
    st.title("Alerts")
    status = data.status(data.url())
    if not status.ok or status.devices == 0:
        st.info(status.message)
        return
    now = timerange.now_ns()
    active = data.alerts(data.url(), now, (ALERT_PENDING, ALERT_FIRING))
    # The history's range comes from the picker, drawn with the other filters: read the URL first.
    wanted = st.query_params.get("range", "24h")
    first = timerange.preset(wanted if wanted in timerange.PRESETS and wanted != "custom" else "24h", now)
    history_all = data.alerts(data.url(), now, (ALERT_RESOLVED,), first.since_ns, first.until_ns)
    tr, f = _filters([*active, *history_all])
    if (tr.since_ns, tr.until_ns) != (first.since_ns, first.until_ns):
        history_all = data.alerts(data.url(), now, (ALERT_RESOLVED,), tr.since_ns, tr.until_ns)
    shown = [a for a in active if f.keep(a)]
    history = [a for a in history_all if f.keep(a)]
    by_view: dict[str, list[AlertRow]] = {v: [] for v in VIEWS}
    for a in shown:
        by_view[view_of(a)].append(a)
    by_view["history"] = history
    c = st.columns(4)
    c[0].metric("Firing", len(by_view["firing"]))
    c[1].metric("Pending", len(by_view["pending"]))
    c[2].metric("Silenced", len(by_view["silenced"]))
    c[3].metric(f"Resolved ({tr.label.lower()})", len(history) if len(history) < 500 else "500+")
    if not active and not history_all:
        st.info(
            "No alerts yet. Alerts appear here when a rule's condition holds: give the collector a rules "
            "file (`fleetscope collector … --alerts rules.toml`)."
        )
    selected: int | None = None
    sections = {
        "firing": ("Firing", "alerts_firing", "Nothing is firing."),
        "pending": (
            "Pending",
            "alerts_pending",
            "Nothing pending: no rule's condition holds without firing yet.",
        ),
        "silenced": ("Silenced", "alerts_silenced", "No active alert is silenced."),
        "history": ("History", "alerts_history", f"No alert resolved in this range ({tr.label.lower()})."),
    }
    for view in VIEWS:
        if view not in f.views:
            continue
        title, key, empty = sections[view]
        picked = _section(title, by_view[view], now, key, empty, history=(view == "history"))
        selected = picked if picked is not None else selected
    _silences(now)
    if selected is not None:
        st.query_params["alert"] = str(selected)
    raw = st.query_params.get("alert")
    if raw:
        if not raw.isdigit():
            st.warning(f"`alert={raw}` in the address is not an alert number.")
            return
        found = next((a for a in [*active, *history_all] if a.id == int(raw)), None)
        if found is None:
            st.warning(f"Alert #{raw} is not active and did not resolve in this range: widen the time range.")
            return
        detail(found, now)
