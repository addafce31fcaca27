"""The dashboard's only way to the database: cached calls into the collector's read API.

Pages call these functions and nothing else that reads data. Each opens a short read-only
session, calls ``fleetscope.collector.query`` (the code the CLI uses, so both answer a question
the same way) and returns its frozen dataclasses, cached with ``st.cache_data`` for a few
seconds: a page that several people keep open, refreshing every few seconds, costs one query
per TTL.

Times passed in are quantised by the callers (see ``timerange``), so reruns within one
refresh period hit the cache instead of missing it by a few nanoseconds.

The database is opened read-only (``query.open_database``), so no bug in a page can write to
the fleet's data.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import streamlit as st

from fleetscope.collector import query as q
from fleetscope.collector.errors import StoreUnavailable
from fleetscope.dashboard.cli import DEFAULT_SERVE_LAST_AFTER_S, SERVE_LAST_ENV
from fleetscope.dashboard.served_last import ServedLast
from fleetscope.proto.vocabulary import log_levels_at_least

log = logging.getLogger(__name__)
T = TypeVar("T")

URL_KEY = "fleetscope_db_url"
FLEET_TTL_S = 5
SERIES_TTL_S = 15
SLOW_TTL_S = 60


class DataUnavailable(RuntimeError):
    """The database cannot be read; the message is for the user."""


@dataclass(frozen=True)
class Status:
    ok: bool
    has_schema: bool
    devices: int
    message: str  # what to do when not ok or empty


def set_url(url: str) -> None:
    st.session_state[URL_KEY] = q.normalise_url(url)


def url() -> str:
    return str(st.session_state.get(URL_KEY, ""))


def display_url() -> str:
    return q.hide_password(url())


@st.cache_resource(show_spinner=False)
def _engine(db_url: str) -> q.Engine:
    return q.open_database(db_url)


@contextmanager
def _session(db_url: str) -> Iterator[q.Session]:
    with _session_of(_engine(db_url)) as session:
        yield session


@contextmanager
def _session_of(engine: q.Engine) -> Iterator[q.Session]:
    """A read session; callable off the script's thread (a background read has no Streamlit
    context, so it is handed the engine)."""
    try:
        with q.session_scope(engine) as session:
            yield session
    except StoreUnavailable as exc:
        log.warning("database read failed: %s", exc)
        raise DataUnavailable(
            f"The database could not be read ({exc}). Is it reachable, and is the URL right?"
        ) from exc


# -- status -------------------------------------------------------------------------------


@st.cache_data(ttl=FLEET_TTL_S, show_spinner=False)
def status(db_url: str) -> Status:
    missing = q.missing_sqlite_file(db_url)
    if missing:
        # Opening it would create an empty file: a read-only viewer must not leave one behind.
        return Status(
            False,
            False,
            0,
            f"no database at `{missing}` yet: start a collector with "
            f"`fleetscope collector --db {display_url()}`, or point --db at its database",
        )
    try:
        engine = _engine(db_url)
        if not q.has_schema(engine):
            return Status(
                False,
                False,
                0,
                "no fleetscope data in this database yet: start a collector with "
                f"`fleetscope collector --db {display_url()}`",
            )
        problem = q.schema_problem(engine)
        if problem:
            return Status(False, True, 0, problem)
        with _session(db_url) as s:
            n = q.count_devices(session=s)
    except DataUnavailable as exc:
        return Status(False, False, 0, str(exc))
    except Exception as exc:
        log.exception("status check failed")
        return Status(False, False, 0, f"The database could not be opened: {exc}")
    if n == 0:
        return Status(
            True,
            True,
            0,
            "no devices yet: start an agent with `fleetscope agent --collector HOST:PORT`"
            " (or `fleetscope simulate --collector HOST:PORT` for simulated ones)",
        )
    return Status(True, True, n, "")


# -- fleet and devices ----------------------------------------------------------------------


def serve_last_after_s() -> float:
    """``fleetscope dashboard --serve-last-after`` (inf: off)."""
    try:
        return float(os.environ.get(SERVE_LAST_ENV, DEFAULT_SERVE_LAST_AFTER_S))
    except ValueError:
        return DEFAULT_SERVE_LAST_AFTER_S


@st.cache_resource(show_spinner=False)
def _fleet_answers() -> ServedLast[Any]:
    # The fleet-wide reads, shared by every viewer of this server: a large fleet's are served
    # as last read while the next is read (served_last), not made for each page load.
    return ServedLast(fresh_s=FLEET_TTL_S, stale_after_s=serve_last_after_s(), max_age_s=SLOW_TTL_S)


def _served(key: tuple[Any, ...], db_url: str, now_ns: int, read: Callable[[q.Session, int], T]) -> T:
    """``read(session, now_ns)``'s answer through ``_fleet_answers``. The engine is taken here,
    on the script's thread: a background read has no Streamlit context to reach the cache by."""
    engine = _engine(db_url)

    def make(at_ns: int) -> T:
        with _session_of(engine) as s:
            return read(s, at_ns)

    return _fleet_answers().get((*key, db_url), now_ns, make).value


def fleet(db_url: str, now_ns: int) -> q.FleetOverview:
    """Every device with its state and current readings, as of ``now_ns`` or, for a fleet
    slow to read, as last read (its ``now_ns`` says when); no sparklines (``fleet_sparklines``
    reads those for the page of the table on view: 30 minutes of every GPU of a 10,000-device
    fleet is most of the page's time, for rows nobody sees)."""
    return _served(("fleet",), db_url, now_ns, lambda s, at: q.fleet_overview(session=s, now_ns=at, sparklines=()))


def fleet_sparklines(db_url: str, now_ns: int, agent_ids: tuple[str, ...]) -> dict[str, q.FleetSparklines]:
    """{agent id: the Fleet table's sparklines} of these devices (as last read, for a page slow
    to read: a 30-minute trend a few seconds older)."""
    return _served(("sparklines", agent_ids), db_url, now_ns,
                   lambda s, at: q.fleet_sparklines(session=s, now_ns=at, agent_ids=list(agent_ids))[1])  # fmt: skip


@st.cache_data(ttl=FLEET_TTL_S, show_spinner=False)
def devices(db_url: str, now_ns: int) -> list[q.DeviceSummary]:
    with _session(db_url) as s:
        return q.list_devices(session=s, now_ns=now_ns)


@dataclass(frozen=True)
class DevicesToPick:
    devices: list[q.DeviceSummary]
    groups: dict[str, list[str]]  # q.device_groups of them: the Compare page's ready-made groups


def devices_to_pick(db_url: str, now_ns: int) -> DevicesToPick:
    """Every device and its ready-made groups, for pickers and filters (names, labels, models):
    as last read for a fleet slow to read (half a second at 10,000 devices, and a tenth more to
    group them), like the Fleet page's summary. A page that shows a device's state or last
    contact reads ``devices``."""

    def read(s: q.Session, at_ns: int) -> DevicesToPick:
        every = q.list_devices(session=s, now_ns=at_ns)
        return DevicesToPick(every, q.device_groups(every))

    return _served(("devices",), db_url, now_ns, read)


@st.cache_data(ttl=FLEET_TTL_S, show_spinner=False)
def installs(db_url: str, device: str, now_ns: int) -> list[q.DeviceSummary]:
    """Every install a name reaches, newest first (a reflashed device: same name, new agent id)."""
    with _session(db_url) as s:
        return q.device_installs(session=s, device=device, now_ns=now_ns)


@st.cache_data(ttl=SERIES_TTL_S, show_spinner=False)
def device_series(db_url: str, device: str, since_ns: int, until_ns: int) -> q.DeviceSeries:
    """The device's charts over every install of its name (its whole history across reinstalls)."""
    with _session(db_url) as s:
        return q.device_series_all_installs(session=s, device=device, since_ns=since_ns, until_ns=until_ns)


@st.cache_data(ttl=SERIES_TTL_S, show_spinner=False)
def logs(
    db_url: str, device: str, since_ns: int, until_ns: int, min_level: str | None, text: str | None
) -> list[q.LogLine]:
    """The newest 500 lines at ``min_level`` or worse (all levels when None) containing ``text``,
    over every install of the device's name."""
    with _session(db_url) as s:
        return q.search_logs_all_installs(
            session=s,
            device=device,
            since_ns=since_ns,
            until_ns=until_ns,
            levels=log_levels_at_least(min_level) if min_level else None,
            text=text or None,
            limit=500,
        )


# -- incidents ----------------------------------------------------------------------------


@st.cache_data(ttl=SERIES_TTL_S, show_spinner=False)
def incidents(
    db_url: str,
    since_ns: int,
    until_ns: int,
    kinds: tuple[str, ...] = (),
    devices: tuple[str, ...] | None = None,
    severities: tuple[str, ...] = (),
    text: str = "",
    limit: int = 500,
) -> list[q.IncidentView]:
    with _session(db_url) as s:
        return q.search_incidents(
            session=s,
            since_ns=since_ns,
            until_ns=until_ns,
            kinds=list(kinds) or None,
            devices=list(devices) if devices is not None else None,
            severities=list(severities) or None,
            text=text or None,
            limit=limit,
        )


@st.cache_data(ttl=SERIES_TTL_S, show_spinner=False)
def incident_counts(
    db_url: str,
    since_ns: int,
    until_ns: int,
    step_s: int,
    kinds: tuple[str, ...] = (),
    devices: tuple[str, ...] | None = None,
    severities: tuple[str, ...] = (),
) -> list[q.IncidentCount]:
    with _session(db_url) as s:
        return q.incident_counts(
            session=s,
            since_ns=since_ns,
            until_ns=until_ns,
            step_s=step_s,
            kinds=list(kinds) or None,
            devices=list(devices) if devices is not None else None,
            severities=list(severities) or None,
        )


@st.cache_data(ttl=SLOW_TTL_S, show_spinner=False)
def incident_kinds(db_url: str) -> list[str]:
    with _session(db_url) as s:
        return q.incident_kinds(session=s)


@st.cache_data(ttl=SLOW_TTL_S, show_spinner=False)
def incident_detail(db_url: str, incident_id: int) -> q.IncidentContext | None:
    """The incident with its device a minute either side (1 s buckets for the charts), the log
    lines within that minute, and its neighbours; None when there is no such incident."""
    with _session(db_url) as s:
        try:
            return q.incident_with_context(
                session=s, incident_id=incident_id, log_window_s=60, log_limit=200, with_series=True
            )
        except q.UnknownIncident:
            return None


# -- compare ------------------------------------------------------------------------------


def _groups(groups: tuple[tuple[str, tuple[str, ...]], ...]) -> dict[str, list[str]]:
    return {name: list(members) for name, members in groups}


@st.cache_data(ttl=SLOW_TTL_S, show_spinner=False)
def comparison(
    db_url: str,
    groups: tuple[tuple[str, tuple[str, ...]], ...],
    since_ns: int,
    until_ns: int,
    wanted_operation: str | None,
) -> q.Comparison:
    """The groups compared with the operation wanted, or the one their devices timed most, and
    the operations they timed (the page's picker): one call, its reads side by side."""
    with _session(db_url) as s:
        return q.compare_with_operations(
            session=s,
            groups=_groups(groups),
            since_ns=q.comparison_start(since_ns, until_ns),
            until_ns=until_ns,
            wanted=wanted_operation,
        )


@st.cache_data(ttl=SLOW_TTL_S, show_spinner=False)
def benchmarks(
    db_url: str, devices: tuple[str, ...], since_ns: int, until_ns: int
) -> list[q.BenchmarkRecord]:
    with _session(db_url) as s:
        return q.benchmark_records(session=s, since_ns=since_ns, until_ns=until_ns, devices=list(devices))


# -- alerts -------------------------------------------------------------------------------


@st.cache_data(ttl=FLEET_TTL_S, show_spinner=False)
def alerts(
    db_url: str,
    now_ns: int,
    states: tuple[str, ...] | None = None,
    since_ns: int | None = None,
    until_ns: int | None = None,
    rule: str | None = None,
    device: str | None = None,
    limit: int = 500,
) -> list[q.AlertRow]:
    """Alerts in these states active at some time in [since, until), newest first; ``silenced``
    judged at ``now_ns``. Label filters are applied by the page (one read serves every filter)."""
    with _session(db_url) as s:
        return q.list_alerts(
            session=s,
            states=list(states) if states is not None else None,
            since_ns=since_ns,
            until_ns=until_ns,
            rule=rule,
            device=device,
            now_ns=now_ns,
            limit=limit,
        )


@st.cache_data(ttl=FLEET_TTL_S, show_spinner=False)
def silences(db_url: str, now_ns: int) -> list[q.SilenceRow]:
    """The silences in force now."""
    with _session(db_url) as s:
        return q.list_silences(session=s, active_at_ns=now_ns)


@st.cache_data(ttl=FLEET_TTL_S, show_spinner=False)
def alert_notifications(db_url: str, alert_id: int) -> list[q.NotificationRow]:
    with _session(db_url) as s:
        return q.alert_notifications(alert_id, session=s)


@st.cache_data(ttl=SERIES_TTL_S, show_spinner=False)
def alert_periods(db_url: str, device: str, since_ns: int, until_ns: int) -> list[q.AlertPeriod]:
    """The alerts of every install of the device's name active in [since, until), oldest first."""
    with _session(db_url) as s:
        periods = [
            p
            for d in q.device_installs(session=s, device=device, now_ns=until_ns)
            for p in q.alert_periods(d.agent_id, since_ns, until_ns, session=s)
        ]
    return sorted(periods, key=lambda p: p.start_ns)


@st.cache_data(ttl=FLEET_TTL_S, show_spinner=False)
def gpu_hardware(db_url: str, device: str, until_ns: int) -> list[q.GpuHardware]:
    with _session(db_url) as s:
        return q.gpu_hardware_all_installs(session=s, device=device, until_ns=until_ns)


@st.cache_data(ttl=FLEET_TTL_S, show_spinner=False)
def jetson_view(db_url: str, device: str, until_ns: int) -> q.JetsonView | None:
    with _session(db_url) as s:
        return q.jetson_view_all_installs(session=s, device=device, until_ns=until_ns)
