"""Readings as people read them (issue 27, item 10: summaries printed "1.20561e+09")."""

from __future__ import annotations

import pytest

from fleetscope.proto.vocabulary import format_reading


@pytest.mark.parametrize(("metric", "value", "text"), [
    ("gpu.memory_used_bytes", 1.20561e9, "1.1 GiB"),
    ("gpu.memory_used_bytes", 1e9, "953.7 MiB"),
    ("host.disk_read_bytes", 12.0, "12 B"),
    ("gpu.pcie_rx_bytes_per_s", 5e8, "476.8 MiB/s"),
    ("gpu.temp_c", 91.0, "91 C"),
    ("gpu.temp_c", 80.55, "80.5 C"),
    ("host.cpu_percent", 93.456, "93.5%"),
    ("gpu.sm_clock_mhz", 1410.0, "1,410 MHz"),
    ("gpu.power_w", 250.0, "250 W"),
    ("sdk.requests", 1.20561e9, "1,205,610,000"),
    ("host.load1", 2.5, "2.5"),
    ("sdk.loss", 0.000123, "0.000123"),
    ("sdk.loss", 1e-7, "0.0000001"),
    ("sdk.ratio", 0.123456, "0.123"),
    ("sdk.delta", -3.5, "-3.5"),
])
def test_a_reading_is_in_its_unit_without_an_exponent(metric: str, value: float, text: str) -> None:
    assert format_reading(metric, value) == text
    assert "e+" not in text and "e-" not in text
