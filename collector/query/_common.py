"""What every read needs: finding devices by name, and bucket and null-skipping arithmetic."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, undefer_group

from fleetscope.collector.errors import UnknownDevice
from fleetscope.collector.storage.id_lists import in_texts
from fleetscope.collector.storage.schema import Device

NS = 10**9
T = TypeVar("T")
# The detector_progress keys (device 0) of each detector's last complete pass, one per device
# share (``storage/shares.py``): the detector job writes the pass's time there once it has read
# the data of every device of the share up to it, and the offline detector its threshold
# settings in the row's state (``offline_rule``). A detector's lag is its oldest share's. The
# bare key is what collectors wrote before jobs were shared; it is read when no share key is.
DETECTOR_PASS_KEY = "_pass"


def pass_key(share: int) -> str:
    """The detector_progress key of a detector's last complete pass over one device share."""
    return f"{DETECTOR_PASS_KEY}/{share:02d}"


def is_pass_key(column: Any) -> Any:
    """SQL: ``column`` is a pass key (a share's, or the bare key of before)."""
    return or_(column == DETECTOR_PASS_KEY, column.startswith(DETECTOR_PASS_KEY + "/", autoescape=True))


def last_passes(rows: Iterable[tuple[str, str, int]]) -> dict[str, int]:
    """Each detector's last complete pass over every share, from its (detector, key, until_ns)
    pass marks: the oldest of its share marks, or its bare mark when it has no share mark."""
    shares: dict[str, int] = {}
    bare: dict[str, int] = {}
    for detector, key, until in rows:
        if key == DETECTOR_PASS_KEY:
            bare[detector] = int(until)
        else:
            shares[detector] = min(shares.get(detector, int(until)), int(until))
    return {**bare, **shares}


def device_rows(session: Session, name: str) -> list[Device]:
    """Every device ``name`` reaches, newest install first: the one device with that agent id, else
    every device registered under that name. A device reinstalled with a fresh state directory (a
    reflashed drone) registers again under its name with a new agent id; its name reaches its whole
    history, its agent id one install. ``UnknownDevice`` lists some known names when none."""
    by_agent = session.scalars(
        select(Device).where(Device.agent_id == name).options(undefer_group("clock_steps"))
    ).first()
    if by_agent is not None:
        return [by_agent]
    rows = list(
        session.scalars(
            select(Device)
            .where(Device.name == name)
            .order_by(Device.first_seen_ns.desc(), Device.id.desc())
            .options(undefer_group("clock_steps"))
        )
    )
    if not rows:
        known = session.scalars(select(Device.name).distinct().order_by(Device.name).limit(20)).all()
        hint = f" (known: {', '.join(known)})" if known else " (no devices have registered yet)"
        raise UnknownDevice(f"no device named {name!r}{hint}")
    return rows


def device_row(session: Session, name: str) -> Device:
    """The device ``name`` names now (with that agent id, or the newest install of that name);
    ``UnknownDevice`` lists some known names. ``device_rows`` gives every install of the name."""
    return device_rows(session, name)[0]


def device_ids(session: Session, names: Iterable[str]) -> dict[str, int]:
    """The ids of the devices ``names`` reach (names or agent ids; names nobody registered are left
    out: a scope, not a lookup), so that ``.values()`` covers every install of each name.

    Keys: the newest install of a name under its name, each earlier install (reinstalled with a
    fresh state directory, a new agent id) under its agent id, the way to pick that one alone."""
    names = list(dict.fromkeys(names))
    if not names:
        return {}
    rows = session.execute(
        select(Device.name, Device.agent_id, Device.id, Device.first_seen_ns).where(
            in_texts(Device.name, names) | in_texts(Device.agent_id, names)
        )
    ).all()
    newest: dict[str, tuple[int, int]] = {}  # name -> (first_seen, id) of its newest install
    for name, first_seen, i in session.execute(
        select(Device.name, Device.first_seen_ns, Device.id).where(in_texts(Device.name, {r.name for r in rows}))
    ).all():
        if name not in newest or (first_seen, i) > newest[name]:
            newest[name] = (first_seen, i)
    out: dict[str, int] = {}
    for r in rows:
        out[r.name if newest[r.name][1] == r.id else r.agent_id] = r.id
    return out


def install_groups(session: Session) -> dict[str, list[int]]:
    """{name: ids of every install of that name, newest first}, for readers that show one row per name."""
    out: dict[str, list[int]] = {}
    for name, i in session.execute(
        select(Device.name, Device.id).order_by(Device.name, Device.first_seen_ns.desc(), Device.id.desc())
    ):
        out.setdefault(name, []).append(i)
    return out


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


class _Beside(Generic[T]):
    """A read running on a connection of its own (``read_beside``); ``result()`` waits for it."""

    def __init__(self, session: Session, read: Callable[[Session], T]) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if session.get_bind().dialect.name == "postgresql":
            self._thread = threading.Thread(target=self._run, args=(session, read), name="fleetscope-read", daemon=True)
            self._thread.start()
        else:
            self._session, self._read = session, read

    def _run(self, session: Session, read: Callable[[Session], T]) -> None:
        try:
            with Session(bind=session.get_bind()) as own:
                self._value = read(own)
        except BaseException as exc:  # handed to result(), raised in the caller's thread
            self._error = exc

    def result(self) -> T:
        if self._thread is None:
            return self._read(self._session)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def read_beside(session: Session, read: Callable[[Session], T]) -> _Beside[T]:
    """Start ``read`` beside the caller's next reads, on a connection of its own, where the
    database serves several at once (PostgreSQL): its round trips and the caller's overlap, and
    so does one's Python work with the other's waits (psycopg releases the GIL). It sees what
    was committed, as every reader of a live fleet does. Elsewhere (SQLite, where one file is
    read by one process anyway, and an in-memory database is private to its connection) it runs
    in the caller's session when ``result()`` is asked for."""
    return _Beside(session, read)
