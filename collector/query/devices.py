"""Devices: the registered devices with their state, one device, and how people name and group them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session, undefer_group

from fleetscope.collector.query._common import device_row, device_rows
from fleetscope.collector.query.types import DeviceSummary
from fleetscope.collector.storage.schema import Device
from fleetscope.proto.vocabulary import DEVICE_KIND_JETSON, DEVICE_KIND_SERVER

ONLINE_WITHIN_NS = 60 * 10**9  # a device heard from within a minute is online


def summary_of(d: Device, now_ns: int) -> DeviceSummary:
    gpus = (d.inventory or {}).get("gpus", [])
    return DeviceSummary(
        name=d.name,
        agent_id=d.agent_id,
        kind=d.kind,
        hostname=d.hostname,
        labels=dict(d.labels or {}),
        online=now_ns - d.last_seen_ns <= ONLINE_WITHIN_NS,
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
    )


def list_devices(
    *, session: Session, now_ns: int, label: Mapping[str, str] | None = None
) -> list[DeviceSummary]:
    """Every registered device by name; ``label`` keeps those with all of these labels."""
    out = []
    for d in session.scalars(select(Device).order_by(Device.name).options(undefer_group("clock_steps"))):
        labels = d.labels or {}
        if label and any(labels.get(k) != v for k, v in label.items()):
            continue
        out.append(summary_of(d, now_ns))
    return out


# What a device is, beyond online and offline (``device_state``).
STATE_ONLINE = "online"
STATE_OFFLINE = "offline"
STATE_IMPORTED = "imported"  # made by `fleetscope scan --db`: history from files, never an agent
STATE_REPLACED = "replaced"  # an earlier install of a name that registered again (new agent id)
IMPORTED_LABEL = "imported"  # the label `scan --db` gives the devices it creates (ingest.scan_import)


def is_imported(d: DeviceSummary) -> bool:
    """A device `fleetscope scan --db` created: it holds imported incidents and no agent ever sent."""
    return d.labels.get(IMPORTED_LABEL) == "true" and d.agent_id.startswith("imported-")


def device_state(d: DeviceSummary, devices: Sequence[DeviceSummary] = ()) -> str:
    """``online``, ``offline``, ``imported`` (neither: it never had an agent), or ``replaced``: an
    earlier install of a name among ``devices`` that fell silent before a newer install of the name
    first registered (a reinstalled device: new state directory, new agent id). Not offline: its
    name's newest install speaks for it, and the name reaches both. Two devices that run at once
    under one name are not replaced: each is online or offline."""
    if is_imported(d):
        return STATE_IMPORTED
    if any(o.name == d.name and o.agent_id != d.agent_id and not is_imported(o)
           and o.first_seen_ns >= d.last_seen_ns for o in devices):
        return STATE_REPLACED
    return STATE_ONLINE if d.online else STATE_OFFLINE


def get_device(*, session: Session, device: str, now_ns: int) -> DeviceSummary:
    """One device by agent id, or the newest install of a name; ``UnknownDevice`` (naming some known
    devices) when none. ``device_installs`` gives every install of a name."""
    return summary_of(device_row(session, device), now_ns)


def device_installs(*, session: Session, device: str, now_ns: int) -> list[DeviceSummary]:
    """Every install ``device`` reaches, newest first: a name reaches each device registered under
    it (a reinstalled device gets a new agent id), an agent id its one install."""
    return [summary_of(d, now_ns) for d in device_rows(session, device)]


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
    groups: dict[str, list[str]] = {}

    def add(key: str, name: str) -> None:
        groups.setdefault(key, [])
        if name not in groups[key]:
            groups[key].append(name)

    for d in devices:
        add(f"model: {device_model(d)}", d.name)
        for g in sorted(set(d.gpus)):
            add(f"GPU: {g}", d.name)
        add(f"kind: {d.kind}", d.name)
        for k, v in sorted(d.labels.items()):
            add(f"label: {k}={v}", d.name)
    for d in devices:
        add(f"device: {d.name}", d.name)
    return groups
