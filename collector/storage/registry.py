"""The device registry: who registered, with what inventory, labels and clock skew."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from fleetscope.collector.storage.citus import is_citus
from fleetscope.collector.storage.deferred_liveness import DeferredLiveness
from fleetscope.collector.storage.schema import Device, streams
from fleetscope.proto.v1 import telemetry_pb2 as pb
from fleetscope.proto.vocabulary import DEVICE_KIND_JETSON, DEVICE_KIND_OTHER, DEVICE_KIND_SERVER

KIND_NAMES = {
    pb.DEVICE_KIND_SERVER: DEVICE_KIND_SERVER,
    pb.DEVICE_KIND_JETSON: DEVICE_KIND_JETSON,
    pb.DEVICE_KIND_OTHER: DEVICE_KIND_OTHER,
    pb.DEVICE_KIND_UNSPECIFIED: DEVICE_KIND_OTHER,
}
SIMULATED_LABEL = "simulated"


def message_to_dict(msg: object) -> dict[str, object]:
    """A proto message as plain JSON types, every field present and integers kept as integers.

    (``json_format.MessageToDict`` would turn 64-bit integers into strings and drop zeros,
    such as GPU index 0, which the dashboard then has to guess back.)
    """
    out: dict[str, object] = {}
    for f in msg.DESCRIPTOR.fields:  # type: ignore[attr-defined]
        value = getattr(msg, f.name)
        if f.message_type is not None and not f.message_type.GetOptions().map_entry:
            if f.is_repeated:
                out[f.name] = [message_to_dict(v) for v in value]
            else:
                out[f.name] = message_to_dict(value)
        elif f.is_repeated:
            out[f.name] = list(value) if not hasattr(value, "items") else dict(value)
        else:
            out[f.name] = value
    return out


@dataclass(frozen=True)
class Registration:
    device_id: int
    clock_skew_ns: int


def register_device(
    engine: Engine, req: pb.RegisterRequest, *, received_ns: int, authorize: Callable[[Session], str | None] | None = None,
    liveness: DeferredLiveness | None = None,
) -> Registration:
    """Insert or update the device row for ``req.agent_id`` and record its stream.

    ``authorize`` runs first in the same transaction (``ingest.identity``): it raises to refuse,
    or returns the fleet the agent id belongs to, stored as the ``fleet`` label.

    On Citus, with the writer's ``liveness`` given, an agent that registers again (its device
    and stream rows known) has its last-seen time and skew written there, a second later with
    the batches' (``deferred_liveness``): when nothing else about the device changed, as after
    a collector's restart moves its agents to another, the registration writes no row on every
    node, and it goes through while a worker is stopped.
    """
    skew = received_ns - req.sent_ns if req.sent_ns else 0
    labels = dict(req.labels)
    inventory = message_to_dict(req.inventory)
    with Session(engine) as session, session.begin():
        deferred = liveness if liveness is not None and is_citus(session.connection()) else None
        fleet = authorize(session) if authorize is not None else None
        if fleet:
            labels["fleet"] = fleet
        device = session.scalars(select(Device).where(Device.agent_id == req.agent_id)).first()
        known = device is not None
        if device is None:
            device = Device(agent_id=req.agent_id, first_seen_ns=received_ns, last_seen_ns=received_ns, counters={})
            session.add(device)
        device.name = req.name or req.hostname or req.agent_id[:8]
        device.hostname = req.hostname
        device.kind = KIND_NAMES.get(req.kind, DEVICE_KIND_OTHER)
        device.boot_id = req.boot_id
        device.agent_version = req.agent_version
        device.labels = labels
        # The agent's batch interval, for the offline threshold (query.devices.offline_after_s);
        # 0 from an agent older than the field: left out, taken as 1 s.
        if req.batch_interval_s > 0:
            inventory["batch_interval_s"] = req.batch_interval_s
        device.inventory = inventory
        if (device.counters or {}).get("stopped"):  # a stopped agent that registers again runs again
            device.counters = {k: v for k, v in device.counters.items() if k != "stopped"}
        device.capabilities = list(req.capabilities)
        if deferred is None or not known:
            device.last_seen_ns = received_ns
            device.clock_skew_ns = skew
        device.simulated = labels.get(SIMULATED_LABEL, "").lower() in ("1", "true", "yes")
        session.flush()
        device_id = device.id
        key = (streams.c.agent_id == req.agent_id) & (streams.c.boot_id == req.boot_id)
        exists = session.execute(select(streams.c.agent_id).where(key)).first()
        if exists and deferred is None:  # with a deferred liveness, written after this transaction
            session.execute(streams.update().where(key).values(clock_skew_ns=skew, last_seen_ns=received_ns))
        elif not exists:
            session.execute(
                streams.insert().values(
                    agent_id=req.agent_id,
                    boot_id=req.boot_id,
                    device_id=device_id,
                    clock_skew_ns=skew,
                    correction_ns=0,
                    first_seen_ns=received_ns,
                    last_seen_ns=received_ns,
                )
            )
    if deferred is not None:
        if known:
            deferred.add_devices({device_id: {"stored": 0, "rejected": 0, "last_seen_ns": received_ns, "clock_skew_ns": skew}})
        if exists:
            deferred.add_stream(req.agent_id, req.boot_id, skew, received_ns)
    return Registration(device_id=device_id, clock_skew_ns=skew)


def lookup_device_id(engine: Engine, agent_id: str) -> int | None:
    with Session(engine) as session:
        return session.scalars(select(Device.id).where(Device.agent_id == agent_id)).first()


