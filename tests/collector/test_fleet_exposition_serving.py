"""How ``/metrics/fleet`` is served (``FleetExposition``): a fleet that renders quickly is rendered
for each scrape; one whose rendering is slow (10,000 devices: seconds) is served its last
rendering at once while the next is made, up to an age limit, and every exposition says its age.
A database that goes away is noticed: the last rendering is served until it is too old, then the
scrape fails instead of serving stale readings for ever."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from fleetscope.collector.errors import StoreUnavailable
from fleetscope.collector.observability.fleet_exposition import AGE_FAMILY, FleetExposition
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.schema import Device, gpu_latest
from tests.conftest import PG_ADMIN_URL
from tests.latest_rows import store_chunk

NS = 10**9
NOW = 1_800_000_000 * NS


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    e = make_engine(db_url)
    yield e
    e.dispose()


def _server(engine: Engine, temp: float) -> None:
    with Session(engine) as s:
        s.add(Device(agent_id="agent-srv", name="srv", kind="server", labels={}, first_seen_ns=NOW - 3600 * NS,
                     last_seen_ns=NOW, inventory={"batch_interval_s": 1.0, "gpus": [{"index": 0, "uuid": "GPU-0"}]}))
        s.commit()
        device_id = s.query(Device.id).scalar()
    with engine.begin() as c:
        store_chunk(c, "gpu", device_id, [{"ts_ns": NOW - NS, "gpu_index": 0, "temp_c": temp}])


def _set_temp(engine: Engine, temp: float) -> None:
    with engine.begin() as c:
        c.execute(update(gpu_latest).values(temp_c=temp))


def _read(x: FleetExposition) -> tuple[float | None, float]:
    """(the GPU's temperature, the exposition's age) of one scrape."""
    values = {s.name: s.value for fam in text_string_to_metric_families(x.render().decode()) for s in fam.samples}
    return values.get("DCGM_FI_DEV_GPU_TEMP"), values[AGE_FAMILY]


def test_a_fleet_that_renders_quickly_is_rendered_for_each_scrape(engine: Engine) -> None:
    _server(engine, 60.0)
    x = FleetExposition(engine, cache_s=0, clock=lambda: NOW)
    assert _read(x)[0] == 60.0
    _set_temp(engine, 90.0)
    temp, age = _read(x)
    assert temp == 90.0, "a quick rendering is never served stale"
    assert 0 <= age < 1.0


def test_a_slow_fleet_is_served_its_last_rendering_while_the_next_is_made(engine: Engine) -> None:
    """``stale_after_s=0``: every rendering counts as slow, as a 10,000-device fleet's does."""
    _server(engine, 60.0)
    x = FleetExposition(engine, cache_s=0, clock=lambda: NOW, stale_after_s=0.0)
    assert _read(x)[0] == 60.0, "the first scrape has nothing to be served: it waits for a rendering"
    _set_temp(engine, 90.0)
    time.sleep(0.05)
    temp, age = _read(x)
    assert temp == 60.0 and age >= 0.05, "the last rendering, at once, with its age"
    x.wait_for_refresh(30)
    temp, age = _read(x)
    assert temp == 90.0, "the rendering made meanwhile"
    assert age < 30


def test_scrapes_during_a_slow_rendering_share_it(engine: Engine) -> None:
    """Twenty scrapes while the next rendering is made (half a second here) start no other one."""
    _server(engine, 60.0)
    renderings: list[float] = []

    def slow(took_s: float) -> None:  # the exposition's observer runs inside each rendering
        renderings.append(took_s)
        time.sleep(0.5)

    x = FleetExposition(engine, cache_s=0, clock=lambda: NOW, stale_after_s=0.0, observe=slow)
    _read(x)
    scrapes = [threading.Thread(target=x.render) for _ in range(20)]
    for t in scrapes:
        t.start()
    for t in scrapes:
        t.join(30)
    x.wait_for_refresh(30)
    assert len(renderings) == 2, "the first scrape's rendering and one made in the background"


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_database_gone_is_served_the_last_rendering_until_it_is_too_old_then_the_scrape_fails(
    engine: Engine, db_url: str
) -> None:
    _server(engine, 60.0)
    x = FleetExposition(engine, cache_s=0, clock=lambda: NOW, stale_after_s=0.0, max_age_s=1.5)
    assert _read(x)[0] == 60.0
    name = db_url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        try:
            temp, age = _read(x)
            assert temp == 60.0 and age < 1.5, "the last rendering while the next cannot be made"
            x.wait_for_refresh(30)
            time.sleep(1.6)
            with pytest.raises(StoreUnavailable):
                x.render()
        finally:
            admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
    engine.dispose()
    assert _read(x)[0] == 60.0, "back once the database is"


def test_the_next_rendering_is_timed_to_be_done_just_before_the_next_scrape(engine: Engine) -> None:
    """Scrapes every 3 s: the rendering planned at a scrape starts one interval, less its length
    and a second, later (not while the body just served is written), so the next scrape gets
    readings about a second old, not an interval old."""
    _server(engine, 60.0)
    renderings: list[float] = []
    x = FleetExposition(engine, cache_s=0, clock=lambda: NOW, stale_after_s=0.0, observe=renderings.append)
    _read(x)
    time.sleep(3)
    _read(x)  # the first served: no interval known yet, the next rendering once the body is out
    time.sleep(0.5)
    assert len(renderings) == 1, "nothing rendered while the body just served is written"
    time.sleep(2.5)
    _read(x)  # an interval of 3 s known: the next rendering planned to start about 2 s from here
    time.sleep(3)
    _set_temp(engine, 90.0)  # after the planned rendering started: the next scrape still shows 60
    temp, age = _read(x)
    assert temp == 60.0 and 0.5 < age < 1.9, f"readings about a second old at a scrape every 3 s, not 3 s: {age}"
    x.wait_for_refresh(30)
    assert len(renderings) == 4
