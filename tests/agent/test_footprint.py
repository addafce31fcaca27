"""The agent's allocator settings (agent/daemon/footprint.py) on this machine's C library."""

from __future__ import annotations

import platform

import pytest

from fleetscope.agent.daemon.footprint import limit_malloc_arenas, release_free_memory

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt/malloc_trim are glibc's")


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@glibc
def test_arena_cap_is_accepted() -> None:
    assert limit_malloc_arenas(2) is True


@glibc
def test_freed_memory_in_the_middle_of_the_heap_goes_back_to_the_kernel() -> None:
    blocks = [bytearray(4000) for _ in range(50_000)]  # ~200 MB in malloc'd chunks
    pinned = blocks[::500]  # survivors scattered through the heap: its top cannot just shrink
    del blocks
    before = _rss_bytes()
    release_free_memory()
    after = _rss_bytes()
    assert len(pinned) == 100
    assert before - after > 100 << 20, f"RSS {before >> 20} MiB -> {after >> 20} MiB"
