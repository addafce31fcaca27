"""Devices: the registered devices with their state, one device, and how people name and group them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session

from fleetscope.collector.query._common import device_row, device_rows, is_pass_key
from fleetscope.collector.query.types import DeviceSummary
from fleetscope.collector.storage.id_lists import in_ids
from fleetscope.collector.storage.schema import Device, detector_progress
from fleetscope.proto.vocabulary import DEVICE_KIND_JETSON, DEVICE_KIND_SERVER, KIND_AGENT_OFFLINE

NS = 10**9
# Readings newer than this are current: the fleet exposition shows a device's readings only then.
# Not whether a device is online: that is ``OfflineRule`` (from the device's own interval).
ONLINE_WITHIN_NS = 60 * NS

# -- online, offline, stopped ------------------------------------------------------------------
# One threshold for the offline detector, `fleetscope devices`, the dashboard and the fleet
# exposition: a device is offline after OFFLINE_INTERVALS of its own batch intervals without
# data (what its agent said at registration; 1 s for an agent too old to say), at least
# OFFLINE_MIN_S, unless a threshold is set outright (the collector's --offline-after, or
# [detectors] offline_after). A device whose agent said it stopped cleanly is "stopped".
OFFLINE_INTERVALS = 3.0
OFFLINE_MIN_S = 10.0
DEFAULT_BATCH_INTERVAL_S = 1.0


@dataclass(frozen=True)
class OfflineRule:
    """When a silent device counts as offline (the offline detector's settings)."""

    after_s: float | None = None  # set outright; None: from the device's interval
    intervals: float = OFFLINE_INTERVALS
    min_s: float = OFFLINE_MIN_S

    def threshold_s(self, batch_interval_s: float | None) -> float:
        if self.after_s is not None:
            return self.after_s
        return max(self.min_s, self.intervals * max(DEFAULT_BATCH_INTERVAL_S, batch_interval_s or 0.0))

    def as_state(self) -> dict[str, Any]:
        return {"offline_after_s": self.after_s, "offline_intervals": self.intervals, "offline_min_s": self.min_s}


def batch_interval_s(inventory: Mapping[str, Any] | None) -> float | None:
    """How often the device's agent sends (it says so when it registers); None when it did not."""
    value = (inventory or {}).get("batch_interval_s")
    try:
        v = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return v if v is not None and math.isfinite(v) and v > 0 else None


def said_stopped(counters: Mapping[str, Any] | None) -> bool:
    """Whether the device's newest batch was its agent's last before a clean stop."""
    return bool((counters or {}).get("stopped"))


def offline_rule(session: Session) -> OfflineRule:
    """The offline threshold the collectors' detector uses (it records its settings on each
    pass), so that every reader agrees with it; the defaults when no detector has run."""
    p = detector_progress.c
    state = session.execute(select(p.state).where(
        p.detector == KIND_AGENT_OFFLINE, p.device_id == 0, is_pass_key(p.key)).order_by(p.until_ns.desc()).limit(1)).scalar()
    if isinstance(state, str):  # a JSON column read raw (SQLite through a plain select)
        import json

        state = json.loads(state)
    if not isinstance(state, dict):
        return OfflineRule()
    try:
        after = state.get("offline_after_s")
        return OfflineRule(after_s=float(after) if after is not None else None,
                           intervals=float(state.get("offline_intervals", OFFLINE_INTERVALS)),
                           min_s=float(state.get("offline_min_s", OFFLINE_MIN_S)))
    except (TypeError, ValueError):
        return OfflineRule()


def liveness(*, last_seen_ns: int, now_ns: int, inventory: Mapping[str, Any] | None,
             counters: Mapping[str, Any] | None, rule: OfflineRule) -> str:
    """``online``, ``offline`` (silent past the device's threshold) or ``stopped`` (its agent
    said it stopped cleanly): the one answer every part gives."""
    if said_stopped(counters):
        return STATE_STOPPED
    silent_ns = now_ns - last_seen_ns
    return STATE_ONLINE if silent_ns <= rule.threshold_s(batch_interval_s(inventory)) * NS else STATE_OFFLINE


# The columns a summary reads: ``list_devices`` selects them as plain rows (no ORM object per
# device: at 10,000 devices the objects cost more than the query).
_SUMMARY_COLUMNS = (
    Device.name, Device.agent_id, Device.kind, Device.hostname, Device.labels, Device.first_seen_ns,
    Device.last_seen_ns, Device.agent_version, Device.clock_skew_ns, Device.inventory, Device.batches_stored,
    Device.batches_rejected, Device.last_rejection, Device.counters, Device.simulated, Device.batches_reanchored,
    Device.last_clock_step_ns,
)  # fmt: skip


def summary_of(d: Device | Row[Any], now_ns: int, rule: OfflineRule | None = None) -> DeviceSummary:
    """A device's summary from its ORM object or a row of ``_SUMMARY_COLUMNS``."""
    gpus = (d.inventory or {}).get("gpus", [])
    rule = rule or OfflineRule()
    live = liveness(last_seen_ns=d.last_seen_ns, now_ns=now_ns, inventory=d.inventory, counters=d.counters, rule=rule)
    return DeviceSummary(
        name=d.name,
        agent_id=d.agent_id,
        kind=d.kind,
        hostname=d.hostname,
        labels=dict(d.labels or {}),
        online=live == STATE_ONLINE,
        first_seen_ns=d.first_seen_ns,
        last_seen_ns=d.last_seen_ns,
        agent_version=d.agent_version,
        clock_skew_ns=d.clock_skew_ns,
        gpu_count=len(gpus),
        gpus=[g.get("name", "") for g in gpus],
        inventory=dict(d.inventory or {}),
        batches_stored=d.batches_stored,
        batches_rejected=d.batches_rejected,
        last_rejection=d.last_rejection,
        counters=dict(d.counters or {}),
        simulated=d.simulated,
        batches_reanchored=d.batches_reanchored or 0,
        last_clock_step_ns=d.last_clock_step_ns or 0,
        stopped=live == STATE_STOPPED,
        offline_after_s=rule.threshold_s(batch_interval_s(d.inventory)),
    )


def list_devices(
    *, session: Session, now_ns: int, label: Mapping[str, str] | None = None, ids: Iterable[int] | None = None
) -> list[DeviceSummary]:
    """Every registered device by name; ``label`` keeps those with all of these labels, ``ids``
    only the devices of these ids (a comparison's groups: not the whole fleet's rows)."""
    out = []
    rule = offline_rule(session)
    q = select(*_SUMMARY_COLUMNS).order_by(Device.name)
    if ids is not None:
        q = q.where(in_ids(Device.id, ids))
    for d in session.execute(q).all():  # at once: a fetch per row cost more than the rows
        labels = d.labels or {}
        if label and any(labels.get(k) != v for k, v in label.items()):
            continue
        out.append(summary_of(d, now_ns, rule))
    return out


# What a device is, beyond online and offline (``device_state``).
STATE_ONLINE = "online"
STATE_OFFLINE = "offline"
STATE_STOPPED = "stopped"  # its agent said it stopped cleanly (a drone landed, a service stopped)
STATE_IMPORTED = "imported"  # made by `fleetscope scan --db`: history from files, never an agent
STATE_REPLACED = "replaced"  # an earlier install of a name that registered again (new agent id)
IMPORTED_LABEL = "imported"  # the label `scan --db` gives the devices it creates (ingest.scan_import)


def is_imported(d: DeviceSummary) -> bool:
    """A device `fleetscope scan --db` created: it holds imported incidents and no agent ever sent."""
    return d.labels.get(IMPORTED_LABEL) == "true" and d.agent_id.startswith("imported-")


def device_state(d: DeviceSummary, devices: Sequence[DeviceSummary] = ()) -> str:
    """``online``, ``offline``, ``stopped`` (its agent said it stopped cleanly), ``imported``
    (neither: it never had an agent), or ``replaced``: an
    earlier install of a name among ``devices`` that fell silent before a newer install of the name
    first registered (a reinstalled device: new state directory, new agent id). Not offline: its
    name's newest install speaks for it, and the name reaches both. Two devices that run at once
    under one name are not replaced: each is online or offline."""
    if is_imported(d):
        return STATE_IMPORTED
    if any(o.name == d.name and o.agent_id != d.agent_id and not is_imported(o)
           and o.first_seen_ns >= d.last_seen_ns for o in devices):
        return STATE_REPLACED
    if d.stopped:
        return STATE_STOPPED
    return STATE_ONLINE if d.online else STATE_OFFLINE


def device_states(devices: Sequence[DeviceSummary]) -> dict[str, str]:
    """{agent id: ``device_state(d, devices)``} for every device, each compared only with the
    installs of its own name (the only ones that can replace it): linear in the fleet, where
    asking ``device_state`` against the whole list for each device was quadratic (10,000 devices:
    10^8 comparisons, tens of seconds)."""
    by_name: dict[str, list[DeviceSummary]] = {}
    for d in devices:
        by_name.setdefault(d.name, []).append(d)
    return {d.agent_id: device_state(d, by_name[d.name]) for d in devices}


def get_device(*, session: Session, device: str, now_ns: int) -> DeviceSummary:
    """One device by agent id, or the newest install of a name; ``UnknownDevice`` (naming some known
    devices) when none. ``device_installs`` gives every install of a name."""
    return summary_of(device_row(session, device), now_ns, offline_rule(session))


def device_installs(*, session: Session, device: str, now_ns: int) -> list[DeviceSummary]:
    """Every install ``device`` reaches, newest first: a name reaches each device registered under
    it (a reinstalled device gets a new agent id), an agent id its one install."""
    rule = offline_rule(session)
    return [summary_of(d, now_ns, rule) for d in device_rows(session, device)]


def count_devices(*, session: Session) -> int:
    return int(session.execute(select(func.count()).select_from(Device)).scalar_one())


def labels_match(labels: Mapping[str, str], selected: Iterable[str]) -> bool:
    """``selected`` are "key=value" strings: all keys must match, any value of one key will do."""
    wanted: dict[str, set[str]] = {}
    for s in selected:
        k, _, v = s.partition("=")
        wanted.setdefault(k, set()).add(v)
    return all(labels.get(k) in vs for k, vs in wanted.items())


def device_model(d: DeviceSummary) -> str:
    """What a person calls the device: the Jetson board, or the server's GPUs."""
    inv = d.inventory or {}
    board = str(inv.get("board_model") or "")
    if d.kind == DEVICE_KIND_JETSON or board:
        return board.replace("NVIDIA ", "", 1) if board else "Jetson"
    if d.gpus:
        names = sorted(set(d.gpus))
        if len(names) == 1:
            return f"{len(d.gpus)}x {names[0]}"
        return ", ".join(f"{d.gpus.count(n)}x {n}" for n in names)
    return "no GPU" if d.kind == DEVICE_KIND_SERVER else d.kind


def device_groups(devices: Sequence[DeviceSummary]) -> dict[str, list[str]]:
    """Ready-made comparison groups: by model, by GPU, by kind and by label, plus each device."""
    groups: dict[str, dict[str, None]] = {}  # ordered sets: a list's "in" made 10,000 devices quadratic

    def add(key: str, name: str) -> None:
        groups.setdefault(key, {})[name] = None

    for d in devices:
        add(f"model: {device_model(d)}", d.name)
        for g in sorted(set(d.gpus)):
            add(f"GPU: {g}", d.name)
        add(f"kind: {d.kind}", d.name)
        for k, v in sorted(d.labels.items()):
            add(f"label: {k}={v}", d.name)
    for d in devices:
        add(f"device: {d.name}", d.name)
    return {key: list(names) for key, names in groups.items()}
