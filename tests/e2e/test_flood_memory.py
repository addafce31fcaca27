"""After a connection flood is closed, a real collector process gives the memory back: 500 idle
HTTP/2 clients, 500 silent sockets and 50 clients stalled mid-batch (6 MiB buffered each), and
15 s after the collector closed the last of them its RSS is back within 16 MiB of its start.
Without the collector's periodic malloc_trim (collector/ingest/memory.py) glibc kept 20-30 MiB
here (110-160 MiB in the issue's runs) of freed memory in its arenas
(benchmarks/bench_connection_flood.py measures it)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from tests.conftest import wait_until
from tests.e2e.test_connection_flood import (
    PREFACE,
    SETTINGS,
    _closed_by_peer,
    _frame,
    _rss_bytes,
    _stall_mid_batch,
    _start_collector,
)

BOUND = 16 << 20


def test_memory_goes_back_within_16_mib_of_the_start_after_a_flood(tmp_path: Path, sqlite_url: str) -> None:
    proc, port, _ = _start_collector(tmp_path, sqlite_url, "--handshake-timeout", "3s", "--idle-timeout", "3s",
                                     "--keepalive-time", "2s", "--keepalive-timeout", "2s", "--max-batch-size", "8MiB")
    try:
        _flood_and_settle(proc, port)
    finally:
        proc.kill()
        proc.wait(10)


def _flood_and_settle(proc: subprocess.Popen, port: int) -> None:
    time.sleep(2.0)  # the jobs' first passes
    start = _rss_bytes(proc.pid)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(500)]
    for s in idle:
        s.sendall(PREFACE + _frame(SETTINGS, 0, 0))
    silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(500)]
    stuck = [_stall_mid_batch(port, message_bytes=8 << 20, send_bytes=6 << 20) for _ in range(50)]
    _closed_by_peer(idle + silent + stuck, timeout_s=60)
    for s in idle + silent + stuck:
        s.close()
    settled: list[int] = []

    def back() -> bool:
        settled.append(_rss_bytes(proc.pid) - start)
        return settled[-1] < BOUND

    try:
        wait_until(back, timeout_s=15, interval_s=0.5, message="RSS back within 16 MiB of the start")
    except AssertionError:
        raise AssertionError(f"15 s after the flood closed the collector still held +{settled[-1] >> 20} MiB "
                             f"(start {start >> 20} MiB)") from None
    assert proc.poll() is None
