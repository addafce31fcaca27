"""``/metrics/fleet`` keeps each device's label texts between scrapes (issue 30: 45,000 GPUs'
labels were formatted again on every scrape). They must follow the device: new labels or a new
inventory give new texts at the next scrape, a device that left is forgotten, and the rendering
is the same whether the texts were kept or built afresh.

Unit tests on hand-made readings, and one through the database (SQLite and PostgreSQL):
a device registered again with other labels is scraped with them."""

from __future__ import annotations

import dataclasses
import math

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update
from sqlalchemy.orm import Session

from fleetscope.collector.observability.fleet_exposition import (
    FleetExposition,
    render_fleet,
    render_fleet_bytes,
)
from fleetscope.collector.observability.prom_text import NumberTexts, number
from fleetscope.collector.observability.series_labels import SeriesLabels
from fleetscope.collector.query.latest import (
    GpuIdentity,
    GpuReading,
    HostReading,
    LatestDevice,
    LatestReadings,
    PointReading,
)
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.schema import Device, gpu_latest

NS = 10**9
NOW = 1_800_000_000 * NS


def _device(name: str, *, labels: dict[str, str], model: str = "NVIDIA A100", uuid: str = "GPU-1") -> LatestDevice:
    return LatestDevice(
        name=name, agent_id=f"agent-{name}", kind="server", hostname="host", labels=labels, online=True,
        last_seen_ns=NOW, driver_version="550.90.07", gpus=[GpuIdentity(0, model, uuid, "00000000:17:00.0", 80 << 30)],
        clock_skew_ns=0, counters={},
    )  # fmt: skip


def _readings(*devices: LatestDevice) -> LatestReadings:
    gpus = [GpuReading(d.name, 0, NOW, {"util_gpu_percent": 42.0, "temp_c": 61.5}) for d in devices]
    hosts = [HostReading(d.name, NOW, {"cpu_percent": 12.0}) for d in devices]
    points = [PointReading(d.name, "jetson.temp_c", {"sensor": "cpu"}, NOW, 50.0) for d in devices]
    return LatestReadings(NOW, 60 * NS, list(devices), gpus, hosts, points, [], [])


def _samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(body.decode())
        for s in fam.samples
    }


def _labels_of(samples: dict, metric: str, device: str) -> dict[str, str]:
    (labels,) = [dict(k[1]) for k in samples if k[0] == metric and dict(k[1])["fleetscope_device"] == device]
    return labels


def test_changed_labels_and_inventory_give_new_texts_at_the_next_scrape() -> None:
    cache, numbers = SeriesLabels(), NumberTexts()
    a, b = _device("a", labels={"site": "lab"}), _device("b", labels={"site": "lab"})
    first = _samples(render_fleet_bytes(_readings(a, b), cache, numbers))
    assert _labels_of(first, "fleetscope_device_info", "a")["label_site"] == "lab"
    assert cache.built == 2

    again = render_fleet_bytes(_readings(a, b), cache, numbers)
    assert cache.built == 2  # nothing changed: both devices' texts kept
    assert _samples(again) == first

    moved = dataclasses.replace(a, labels={"site": "field", "rack": "r2"})
    swapped = dataclasses.replace(b, gpus=[GpuIdentity(0, "NVIDIA H100", "GPU-2", "00000000:18:00.0", 80 << 30)])
    later = _samples(render_fleet_bytes(_readings(moved, swapped), cache, numbers))
    assert cache.built == 4  # each changed device's texts made again
    info = _labels_of(later, "fleetscope_device_info", "a")
    assert (info["label_site"], info["label_rack"]) == ("field", "r2")
    gpu = _labels_of(later, "DCGM_FI_DEV_GPU_UTIL", "b")
    assert (gpu["modelName"], gpu["UUID"], gpu["pci_bus_id"]) == ("NVIDIA H100", "GPU-2", "00000000:18:00.0")
    # ... and the rendering is the one made without any kept texts.
    assert later == _samples(render_fleet(_readings(moved, swapped)).encode())


def test_a_device_that_left_is_forgotten() -> None:
    cache, numbers = SeriesLabels(), NumberTexts()
    a, b = _device("a", labels={}), _device("b", labels={})
    render_fleet_bytes(_readings(a, b), cache, numbers)
    body = render_fleet_bytes(_readings(b), cache, numbers)
    assert b'fleetscope_device="a"' not in body
    render_fleet_bytes(_readings(a, b), cache, numbers)
    assert cache.built == 3  # a came back: its texts made again, not kept while it was gone


def test_kept_value_texts_are_the_formatted_ones() -> None:
    numbers = NumberTexts(limit=4)
    for v in (0.0, -0.0, 1, 1.0, 42.5, 1e15, 1e16, 10**16, -3.25, math.inf, -math.inf, math.nan, 7.0, 8.0, 9.0):
        assert numbers[v] == (number(v) + "\n").encode(), v
        assert numbers[v] == (number(v) + "\n").encode(), v  # from the memory the second time
    assert len(numbers) <= 4  # started again at its limit
    assert number(10**16) == "10000000000000000" and number(1e16) == "1e+16"  # never shared: not kept


def test_a_device_registered_again_with_other_labels_is_scraped_with_them(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        with Session(engine) as s:
            s.add(Device(agent_id="agent-a", name="a", kind="server", labels={"site": "lab"}, first_seen_ns=NOW - 3600 * NS,
                         last_seen_ns=NOW, inventory={"batch_interval_s": 1.0, "gpus": [
                             {"index": 0, "name": "NVIDIA A100", "uuid": "GPU-old", "memory_total_bytes": 80e9}]}))  # fmt: skip
            s.commit()
        with engine.begin() as conn:
            conn.execute(gpu_latest.insert().values(device_id=1, gpu_index=0, ts_ns=NOW - NS, util_gpu_percent=30.0))
        exposition = FleetExposition(engine, cache_s=0, clock=lambda: NOW)
        before = _samples(exposition.render())
        assert _labels_of(before, "fleetscope_device_info", "a")["label_site"] == "lab"
        assert _labels_of(before, "DCGM_FI_DEV_GPU_UTIL", "a")["UUID"] == "GPU-old"
        with engine.begin() as conn:  # what a registration with new labels and a new GPU writes
            conn.execute(update(Device).values(labels={"site": "field"}, inventory={"batch_interval_s": 1.0, "gpus": [
                {"index": 0, "name": "NVIDIA H100", "uuid": "GPU-new", "memory_total_bytes": 80e9}]}))  # fmt: skip
        after = _samples(exposition.render())
        assert _labels_of(after, "fleetscope_device_info", "a")["label_site"] == "field"
        gpu = _labels_of(after, "DCGM_FI_DEV_GPU_UTIL", "a")
        assert (gpu["UUID"], gpu["modelName"]) == ("GPU-new", "NVIDIA H100")
        assert after[("DCGM_FI_DEV_GPU_UTIL", tuple(sorted(gpu.items())))] == 30.0
    finally:
        engine.dispose()
