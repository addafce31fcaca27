"""The Compare page in a fleet too large to list every device in its pickers (issue 30: 10,000
device options per picker took the browser seconds to draw). The pickers list the models, GPUs,
kinds and labels; a search box under each lists the devices whose name contains what is typed;
picked devices stay listed, and a link naming any device of the fleet opens with it picked.

Real Streamlit AppTest over a real SQLite database."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import insert

from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.schema import Device
from fleetscope.dashboard import device_options
from tests.dashboard.conftest import app, frame, no_errors, texts

NS = 10**9
DEVICES = device_options.LIST_EVERY_DEVICE_UP_TO + 20


@pytest.fixture
def large_fleet(tmp_path) -> str:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    engine = make_engine(url)
    now = time.time_ns()
    rows = []
    for i in range(1, DEVICES + 1):
        jetson = i % 2 == 0
        gpus = [{"index": 0, "name": "Orin" if jetson else "NVIDIA A100-SXM4-80GB", "memory_total_bytes": 8 << 30}]
        rows.append({
            "agent_id": f"agent-{i}", "name": f"dev-{i:03d}", "hostname": f"dev-{i:03d}",
            "kind": "jetson" if jetson else "server", "labels": {"group": f"g{i % 4}"},
            "first_seen_ns": now - 86400 * NS, "last_seen_ns": now,
            "inventory": {"batch_interval_s": 600, "gpus": gpus,
                          **({"board_model": "NVIDIA Jetson Orin Nano Developer Kit"} if jetson else {})},
        })  # fmt: skip
    with engine.begin() as conn:
        conn.execute(insert(Device.__table__), rows)
    engine.dispose()
    return url


def _options(at, i: int) -> list[str]:  # type: ignore[no-untyped-def]
    return list(at.multiselect(key=f"keep_cmp_group_{i}").options)


def test_pickers_list_groups_and_the_devices_found_by_name(large_fleet: str) -> None:
    at = app(large_fleet, "compare", query={"range": "1h"}).run()
    no_errors(at)
    listed = _options(at, 0)
    assert "label: group=g1" in listed and "kind: jetson" in listed and "GPU: NVIDIA A100-SXM4-80GB" in listed
    assert not [o for o in listed if o.startswith("device: ")], "no device listed before a search"
    assert len(listed) < 20

    at.text_input(key="keep_cmp_find_0").input("DEV-01").run()  # any case
    no_errors(at)
    found = [o for o in _options(at, 0) if o.startswith("device: ")]
    assert found == [f"device: dev-{i:03d}" for i in range(10, 20)]
    assert "10 devices listed in the picker above." in texts(at)
    assert not [o for o in _options(at, 1) if o.startswith("device: ")], "group B's picker has its own search"

    at.multiselect(key="keep_cmp_group_0").set_value(["device: dev-012"]).run()
    no_errors(at)
    assert at.query_params["a"] in ("device: dev-012", ["device: dev-012"])  # the link keeps the pick
    table = frame(at, "Metric")
    devices_row = table[table["Metric"] == "Devices"].iloc[0]
    assert devices_row[[c for c in table.columns if c.startswith("A ·")][0]] == "1"

    # The search cleared, the picked device stays (a picker drops a pick that is not listed).
    at.text_input(key="keep_cmp_find_0").input("").run()
    assert at.multiselect(key="keep_cmp_group_0").value == ["device: dev-012"]
    assert [o for o in _options(at, 0) if o.startswith("device: ")] == ["device: dev-012"]

    at.text_input(key="keep_cmp_find_0").input("dev").run()
    assert len([o for o in _options(at, 0) if o.startswith("device: ")]) == device_options.FOUND_AT_MOST
    assert f"{DEVICES} devices match; the first {device_options.FOUND_AT_MOST} are listed" in texts(at)
    at.text_input(key="keep_cmp_find_0").input("no-such").run()
    assert "No device name contains “no-such”." in texts(at)


def test_a_link_to_any_device_opens_with_it_picked(large_fleet: str) -> None:
    last = f"device: dev-{DEVICES:03d}"
    at = app(large_fleet, "compare", query={"range": "1h", "a": last, "b": "label: group=g1"}).run()
    no_errors(at)
    assert "Not in this fleet" not in texts(at)
    assert at.multiselect(key="keep_cmp_group_0").value == [last]
    assert at.multiselect(key="keep_cmp_group_1").value == ["label: group=g1"]
    table = frame(at, "Metric")
    counts = table[table["Metric"] == "Devices"].iloc[0]
    assert sorted(counts[c] for c in table.columns if c != "Metric") == ["1", str(DEVICES // 4)]


def test_a_small_fleet_lists_every_device() -> None:
    options = [f"device: d{i}" for i in range(device_options.LIST_EVERY_DEVICE_UP_TO)] + ["kind: server"]
    assert device_options.every_device_listed(options)
    assert not device_options.every_device_listed([*options, "device: one more"])
