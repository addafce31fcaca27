"""parse_tegrastats_line against the shared corpus (../shared/corpus/tegrastats) and made-up lines.

Every fact of each MANIFEST entry is checked through ``CHECKS``, a table from the manifest's
fact key to the reading field(s) it describes and how the written value converts:

=====================================  ===============================================
manifest key                           reading field
=====================================  ===============================================
timestamp (MM-DD-YYYY HH:MM:SS)        timestamp (naive datetime)
ram_used_mb / ram_total_mb             ram_used_mb / ram_total_mb
lfb (``466x4MB``, ``1x512kB``)         ram_lfb_blocks, ram_lfb_block_kb
swap_used_mb / _total_mb / _cached_mb  swap_used_mb / swap_total_mb / swap_cached_mb
iram_used_kb / iram_total_kb           iram_used_kb / iram_total_kb
cpu_cores                              len(cpu_cores)
cpu (``[30%@1036, off]``)              cpu_cores as (load_pct, freq_mhz) pairs
emc_load_pct / emc_freq_mhz            emc_load_pct / emc_freq_mhz
gr3d_load_pct (``None`` on Thor)       gr3d_load_pct
gr3d_freq_mhz (``76`` or ``[0, 0]``)   gr3d_freq_mhz, always a tuple (one per GPC)
ape_mhz, edp_limit_mhz                 ape_mhz, edp_limit_mhz
mts_fg_pct / mts_bg_pct                mts_fg_pct / mts_bg_pct
engines (``NVENC=79%@166``, ``=off``)  engines_mhz (MHz or None) and engine_loads_pct
temps_c (``PLL=57.0``, ``cpu=[a, b]``) temps_c, by sensor name exactly as printed
rails_as_printed (mW; cur/avg[/max])   rails_mw, by rail name exactly as printed
=====================================  ===============================================

A key the table does not know fails the test; ``NARRATIVE`` would list keys that cannot be
checked (none today). A field whose key an entry does not list must be absent from the reading
(None or empty), and no token of a corpus line may end up unparsed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

import pytest

from fleetscope.agent.parsers.tegrastats import (
    TegrastatsCore,
    TegrastatsParseError,
    TegrastatsReading,
    parse_tegrastats_line,
)
from tests.corpus import CORPUS_DIR, manifest_facts, require_corpus, sample_text

FOLDER = "tegrastats"
_NAMES = sorted(p.name for p in (CORPUS_DIR / FOLDER).glob("*.txt")) or ["<corpus missing>"]
RAILS_KEY = "rails_as_printed (mW; cur/avg[/max])"

# --------------------------------------------------------------------------- value conversions

_ITEM = re.compile(r"([^=,\s]+)=(\[[^\]]*\]|[^,]+)")


def _opt_int(value: str) -> int | None:
    return None if value == "None" else int(value)


def _items(value: str) -> dict[str, str]:
    """'A=1, B=[2, 3]' -> {'A': '1', 'B': '[2, 3]'}, refusing anything left over."""
    pairs = _ITEM.findall(value)
    assert ", ".join(f"{k}={v.strip()}" for k, v in pairs) == value, f"unexpected manifest items {value!r}"
    return {k: v.strip() for k, v in pairs}


def _numbers(value: str) -> list[str]:
    """'76' -> ['76'], '[0, 0]' -> ['0', '0']."""
    return [v.strip() for v in value.strip("[]").split(",")]


def _lfb(value: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)x(\d+)(kB|MB)", value)
    assert m, value
    return int(m.group(1)), int(m.group(2)) * (1024 if m.group(3) == "MB" else 1)


def _core(item: str) -> TegrastatsCore:
    if item == "off":
        return TegrastatsCore(None, None)
    m = re.fullmatch(r"(\d+)%@(\d+)", item)
    assert m, item
    return TegrastatsCore(int(m.group(1)), int(m.group(2)))


def _engine(value: str) -> tuple[int | None, int | None]:
    """'off' -> (None, None), '716' -> (716, None), '79%@166' -> (166, 79), '@0' -> (0, None)."""
    if value == "off":
        return None, None
    m = re.fullmatch(r"(?:(\d+)%)?@?(\d+)", value)
    assert m, value
    return int(m.group(2)), _opt_int(m.group(1) or "None")


# ------------------------------------------------------------------------------------ checks

Check = Callable[[TegrastatsReading, str], None]


def _field(attr: str, convert: Callable[[str], object] = int) -> Check:
    def check(r: TegrastatsReading, value: str) -> None:
        assert getattr(r, attr) == convert(value), (attr, getattr(r, attr), value)

    return check


def check_timestamp(r: TegrastatsReading, value: str) -> None:
    assert r.timestamp == datetime.strptime(value, "%m-%d-%Y %H:%M:%S")


def check_lfb(r: TegrastatsReading, value: str) -> None:
    assert (r.ram_lfb_blocks, r.ram_lfb_block_kb) == _lfb(value)


def check_cpu_count(r: TegrastatsReading, value: str) -> None:
    assert len(r.cpu_cores) == int(value)


def check_cpu(r: TegrastatsReading, value: str) -> None:
    assert r.cpu_cores == tuple(_core(item) for item in _numbers(value))


def check_gr3d_freq(r: TegrastatsReading, value: str) -> None:
    assert r.gr3d_freq_mhz == tuple(int(f) for f in _numbers(value))


def check_engines(r: TegrastatsReading, value: str) -> None:
    expected = {name: _engine(v) for name, v in _items(value).items()}
    assert dict(r.engines_mhz) == {name: freq for name, (freq, _) in expected.items()}
    assert dict(r.engine_loads_pct) == {n: load for n, (_, load) in expected.items() if load is not None}


def check_temps(r: TegrastatsReading, value: str) -> None:
    expected = {name: tuple(float(t) for t in _numbers(v)) for name, v in _items(value).items()}
    assert dict(r.temps_c) == expected


def check_rails(r: TegrastatsReading, value: str) -> None:
    expected = {name: tuple(int(mw) for mw in _numbers(v)) for name, v in _items(value).items()}
    assert dict(r.rails_mw) == expected


CHECKS: dict[str, Check] = {
    "timestamp": check_timestamp,
    "ram_used_mb": _field("ram_used_mb"),
    "ram_total_mb": _field("ram_total_mb"),
    "lfb": check_lfb,
    "swap_used_mb": _field("swap_used_mb"),
    "swap_total_mb": _field("swap_total_mb"),
    "swap_cached_mb": _field("swap_cached_mb"),
    "iram_used_kb": _field("iram_used_kb"),
    "iram_total_kb": _field("iram_total_kb"),
    "cpu_cores": check_cpu_count,
    "cpu": check_cpu,
    "emc_load_pct": _field("emc_load_pct"),
    "emc_freq_mhz": _field("emc_freq_mhz"),
    "gr3d_load_pct": _field("gr3d_load_pct", _opt_int),
    "gr3d_freq_mhz": check_gr3d_freq,
    "ape_mhz": _field("ape_mhz"),
    "edp_limit_mhz": _field("edp_limit_mhz"),
    "mts_fg_pct": _field("mts_fg_pct"),
    "mts_bg_pct": _field("mts_bg_pct"),
    "engines": check_engines,
    "temps_c": check_temps,
    RAILS_KEY: check_rails,
}
# Manifest keys that are narrative rather than checkable, with the reason. None today.
NARRATIVE: dict[str, str] = {}

# The reading fields each manifest key covers: an entry without the key means tegrastats did
# not print it, so the parser must report it absent.
FIELDS_OF_KEY: dict[str, tuple[str, ...]] = {
    "timestamp": ("timestamp",),
    "lfb": ("ram_lfb_blocks", "ram_lfb_block_kb"),
    "swap_used_mb": ("swap_used_mb",),
    "swap_total_mb": ("swap_total_mb",),
    "swap_cached_mb": ("swap_cached_mb",),
    "iram_used_kb": ("iram_used_kb", "iram_lfb_kb"),
    "iram_total_kb": ("iram_total_kb",),
    "cpu": ("cpu_cores",),
    "emc_load_pct": ("emc_load_pct",),
    "emc_freq_mhz": ("emc_freq_mhz",),
    "gr3d_load_pct": ("gr3d_load_pct",),
    "gr3d_freq_mhz": ("gr3d_freq_mhz",),
    "ape_mhz": ("ape_mhz",),
    "edp_limit_mhz": ("edp_limit_mhz",),
    "mts_fg_pct": ("mts_fg_pct",),
    "mts_bg_pct": ("mts_bg_pct",),
    "engines": ("engines_mhz", "engine_loads_pct"),
    "temps_c": ("temps_c",),
    RAILS_KEY: ("rails_mw",),
}


def _absent(value: object) -> bool:
    return value is None or value == () or value == {}


# ------------------------------------------------------------------------------ corpus tests


def test_manifest_and_folder_agree() -> None:
    require_corpus(FOLDER)
    entries = manifest_facts(FOLDER)
    assert set(entries) == set(_NAMES)
    for name, pairs in entries.items():
        assert pairs, f"{name}: no facts"
        for key, _ in pairs:
            assert key in CHECKS or key in NARRATIVE, f"{name}: no check for {key!r}"
    assert set(FIELDS_OF_KEY) <= set(CHECKS)


@pytest.mark.parametrize("name", _NAMES)
def test_corpus_sample(name: str) -> None:
    folder = require_corpus(FOLDER)
    pairs = manifest_facts(FOLDER)[name]
    reading = parse_tegrastats_line(sample_text(folder / name))
    checked = 0
    for key, value in pairs:
        if key not in NARRATIVE:
            CHECKS[key](reading, value)
            checked += 1
    assert checked == len(pairs)
    listed = {key for key, _ in pairs}
    for key, attrs in FIELDS_OF_KEY.items():
        if key not in listed:
            for attr in attrs:
                assert _absent(getattr(reading, attr)), (
                    f"{attr} should be absent, got {getattr(reading, attr)!r}"
                )
    assert reading.unparsed == ()


def test_corpus_wrapped_line_equals_the_joined_line() -> None:
    folder = require_corpus(FOLDER)
    text = sample_text(folder / "orin-nano-2024-cmu-argus-wrapped.txt")
    assert "\n" in text
    assert parse_tegrastats_line(text) == parse_tegrastats_line(" ".join(text.split()))


def test_corpus_xavier_gpu_temperature_and_gpu_rail_are_kept_apart() -> None:
    folder = require_corpus(FOLDER)
    reading = parse_tegrastats_line(sample_text(folder / "xavier-agx-2018-sudo.txt"))
    assert reading.temps_c["GPU"] == (30.0,)
    assert reading.rails_mw["GPU"] == (466, 466)


# ------------------------------------------------------------------------- made-up lines
# Invented values in the documented formats (not copied from the corpus).


def test_minimal_line_has_only_ram() -> None:
    reading = parse_tegrastats_line("RAM 100/200MB")
    assert (reading.ram_used_mb, reading.ram_total_mb) == (100, 200)
    assert reading.ram_lfb_blocks is None and reading.swap_used_mb is None and reading.cpu_cores == ()
    assert reading.gr3d_freq_mhz is None and reading.temps_c == {} and reading.unparsed == ()


def test_unknown_tokens_are_kept_not_fatal() -> None:
    line = (
        "01-02-2030 03:04:05 RAM 1000/7000MB (lfb 3x4MB) CPU [10%@729,off] NEWTHING 5x@7 "
        "GR3D_FREQ 9%@[510,511] FOO_ENGINE 12%@300 soc9@41.5C/40C VDD_X 10mW/20mW/30mW ZZ"
    )
    reading = parse_tegrastats_line(line)
    assert reading.unparsed == ("NEWTHING", "5x@7", "ZZ")
    assert reading.timestamp == datetime(2030, 1, 2, 3, 4, 5)
    assert reading.cpu_cores == ((10, 729), (None, None)) and reading.cpu_online_count == 1
    assert reading.gr3d_load_pct == 9 and reading.gr3d_freq_mhz == (510, 511)
    assert reading.engines_mhz == {"FOO_ENGINE": 300} and reading.engine_loads_pct == {"FOO_ENGINE": 12}
    assert reading.temps_c == {"soc9": (41.5, 40.0)}
    assert reading.rails_mw == {"VDD_X": (10, 20, 30)}


def test_old_format_shared_frequency_with_off_cores_and_negative_temperature() -> None:
    reading = parse_tegrastats_line("RAM 10/20MB cpu [50%,off,off,7%]@921 EMC 3%@800 GR3D 1%@153 CV0@-256C")
    assert reading.cpu_cores == ((50, 921), (None, None), (None, None), (7, 921))
    assert (reading.emc_load_pct, reading.emc_freq_mhz) == (3, 800)
    assert reading.gr3d_freq_mhz == (153,)
    assert reading.temps_c == {"CV0": (-256.0,)}


def test_crlf_and_leading_trailing_whitespace() -> None:
    reading = parse_tegrastats_line("  RAM 5/6MB SWAP 0/1MB (cached 0MB)\r\n")
    assert reading.swap_total_mb == 1 and reading.swap_cached_mb == 0


def test_a_malformed_known_field_is_kept_as_unparsed() -> None:
    reading = parse_tegrastats_line("RAM 5/6MB CPU [x%] CPU 5%")
    assert reading.cpu_cores == ()
    assert reading.engines_mhz == {}  # "CPU" is never an engine name
    assert reading.unparsed == ("CPU", "[x%]", "CPU", "5%")


@pytest.mark.parametrize(
    "line",
    [
        "",
        "   \n  ",
        "hello world",
        "Wed Mar  3 10:11:12 UTC 2027",
        "CPU [1%@729,2%@729] GR3D_FREQ 0% cpu@50C VDD_IN 100mW/100mW",  # no RAM field
        "RAM 12/abcMB SWAP 0/0MB",
        "RAM: 1000/2000MB",
        "RAM 1000/2000",  # no unit
    ],
)
def test_not_tegrastats_raises(line: str) -> None:
    with pytest.raises(TegrastatsParseError):
        parse_tegrastats_line(line)


def test_impossible_timestamp_raises() -> None:
    with pytest.raises(TegrastatsParseError, match="timestamp"):
        parse_tegrastats_line("13-45-2024 10:00:00 RAM 1/2MB")


def test_parse_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not tegrastats output"):
        parse_tegrastats_line("nvidia-smi: command not found")
