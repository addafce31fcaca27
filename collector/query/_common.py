"""What every read needs: finding devices by name, and bucket and null-skipping arithmetic."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session, undefer_group

from fleetscope.collector.errors import UnknownDevice
from fleetscope.collector.storage.schema import Device

NS = 10**9


def device_row(session: Session, name: str) -> Device:
    """The device named ``name`` (or with that agent id); ``UnknownDevice`` lists some known names."""
    device = session.scalars(
        select(Device).where((Device.name == name) | (Device.agent_id == name)).options(undefer_group("clock_steps"))
    ).first()
    if device is None:
        known = session.scalars(select(Device.name).order_by(Device.name).limit(20)).all()
        hint = f" (known: {', '.join(known)})" if known else " (no devices have registered yet)"
        raise UnknownDevice(f"no device named {name!r}{hint}")
    return device


def device_ids(session: Session, names: Iterable[str]) -> dict[str, int]:
    """{name: id} of the named devices; names nobody registered are left out (a scope, not a lookup)."""
    names = list(dict.fromkeys(names))
    if not names:
        return {}
    rows = session.execute(select(Device.name, Device.id).where(Device.name.in_(names))).all()
    return {n: i for n, i in rows}


def floor_to(x: int, step: int) -> int:
    return x // step * step


def ceil_to(x: int, step: int) -> int:
    return -(-x // step) * step


def mean_of(xs: Iterable[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else None


def sum_of(xs: Iterable[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return sum(v) if v else None


def max_of(xs: Iterable[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return max(v) if v else None
