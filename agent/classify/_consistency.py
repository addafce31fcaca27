"""Facts checked against each other before a finding is stored.

A classifier reads each number where it is printed; a paste can still join numbers that do not
belong together, and some frameworks print figures that disagree (PyTorch on Windows' shared GPU
memory reports more allocated than the card's total). Nothing is dropped or corrected: every rule
a finding's facts break is kept in its ``consistency_flags`` fact (comma-separated), so a query can
find them and a reader knows which figures to doubt.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleetscope.agent.records import FactValue

__all__ = ["ORDERED", "consistency_flags"]

# (smaller, larger): when both facts are present, the first must not exceed the second.
ORDERED: tuple[tuple[str, str], ...] = (
    ("requested_bytes", "total_capacity_bytes"),
    ("free_bytes", "total_capacity_bytes"),
    ("allocated_bytes", "total_capacity_bytes"),
    ("reserved_bytes", "total_capacity_bytes"),
    ("process_in_use_bytes", "total_capacity_bytes"),
    ("reserved_unallocated_bytes", "total_capacity_bytes"),
    ("allocated_bytes", "reserved_bytes"),
    ("device_free_memory_bytes", "device_total_memory_bytes"),
    ("bfc_in_use_bytes", "bfc_limit_bytes"),
    ("bfc_max_in_use_bytes", "bfc_limit_bytes"),
    ("memcg_usage_bytes", "memcg_limit_bytes"),
    ("free_swap_bytes", "total_swap_bytes"),
    ("anon_rss_bytes", "total_vm_bytes"),
    ("zone_normal_min_bytes", "zone_normal_low_bytes"),
    ("zone_normal_low_bytes", "zone_normal_high_bytes"),
    ("pages_reserved", "pages_ram"),
    ("pages_cma_reserved", "pages_ram"),
    ("requested_bytes", "aligned_bytes"),
)
# Figures of a size, a count or a duration: numbers, never negative (and whole for bytes/pages).
_UNIT_SUFFIXES = ("_bytes", "_pages", "_ms", "_s", "_qps")
_WHOLE_SUFFIXES = ("_bytes", "_pages")
_STAT_ORDER = ("min", "median", "max")


def _num(v: FactValue | None) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def consistency_flags(facts: Mapping[str, FactValue]) -> list[str]:
    """The rules ``facts`` break, as ``"a>b"`` (an order) or ``"bad_unit:a"`` (a figure's unit)."""
    flags: list[str] = []
    for key, value in facts.items():
        if key.endswith(_UNIT_SUFFIXES):
            n = _num(value)
            if n is None or n < 0 or (key.endswith(_WHOLE_SUFFIXES) and not isinstance(value, int)):
                flags.append(f"bad_unit:{key}")
    for small, large in ORDERED:
        a, b = _num(facts.get(small)), _num(facts.get(large))
        if a is not None and b is not None and a > b:
            flags.append(f"{small}>{large}")
    # trtexec statistics of one metric: min <= median <= max and min <= mean <= max.
    for key in facts:
        if key.endswith("_min_ms"):
            base = key[: -len("_min_ms")]
            lo, hi = _num(facts.get(key)), _num(facts.get(f"{base}_max_ms"))
            if lo is None or hi is None:
                continue
            for stat in ("mean", "median"):
                v = _num(facts.get(f"{base}_{stat}_ms"))
                if v is not None and not lo <= v <= hi:
                    flags.append(f"{base}_{stat}_ms outside min..max")
            if lo > hi:
                flags.append(f"{base}_min_ms>{base}_max_ms")
    return flags
