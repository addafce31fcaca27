"""The Jetson sysfs source over recorded board trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetscope.agent.samplers._base import SourceUnavailable
from fleetscope.agent.samplers.jetson import JetsonSampler
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.agent.test_jetson_sysfs import ORIN_NANO, ORIN_NANO_LINKS, XAVIER_NX, build_tree


def _metrics(out, name: str, label: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    return {m.labels[label]: m.value for m in out.metrics if m.name == name}


def test_orin_nano_sample(tmp_path: Path) -> None:
    root = build_tree(tmp_path, ORIN_NANO, ORIN_NANO_LINKS)
    sampler = JetsonSampler(sysfs_root=root)
    out = sampler.sample(1_000)
    (gpu,) = out.gpu
    assert gpu.util_gpu_percent == pytest.approx(34.5)
    assert (gpu.sm_clock_mhz, gpu.sm_clock_max_mhz) == (306.0, 624.0)
    assert gpu.temp_c == pytest.approx(46.031)
    rails = _metrics(out, "jetson.power_mw", "rail")
    assert set(rails) == {"VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"}
    assert rails["VDD_IN"] == pytest.approx(5000 * 1001 / 1000, rel=0.01)
    temps = _metrics(out, "jetson.temp_c", "sensor")
    assert temps["cpu-thermal"] == pytest.approx(47.5) and "cv1-thermal" not in temps, "a sensor that is off is no reading"
    assert _metrics(out, "jetson.nvpmodel_id", "mode") == {"7W": 1.0}
    inv = pb.Inventory()
    sampler.inventory_fields(inv)
    assert (inv.board_model, inv.l4t_release, inv.jetpack_version) == ("NVIDIA Jetson Orin Nano Developer Kit", "36.4.3", "6.2")


def test_xavier_nx_jetson_clocks_on(tmp_path: Path) -> None:
    out = JetsonSampler(sysfs_root=build_tree(tmp_path, XAVIER_NX)).sample(1)
    assert out.gpu[0].util_gpu_percent == pytest.approx(51.2)
    assert [m.value for m in out.metrics if m.name == "jetson.jetson_clocks"] == [1.0]


def test_not_a_jetson(tmp_path: Path) -> None:
    assert not JetsonSampler.available(tmp_path)
    with pytest.raises(SourceUnavailable, match="no Jetson board"):
        JetsonSampler(sysfs_root=tmp_path)
