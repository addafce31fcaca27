"""Connections cannot exhaust a real collector process: a flood of idle sockets beyond its
open-file limit leaves room for the database and a real agent, idle connections are closed,
and clients that stop half-way through a large batch are dropped without pinning memory.

All traffic is on loopback; every wait is bounded."""

from __future__ import annotations

import os
import selectors
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_until
from tests.helpers import CountingSampler, make_agent, sample_count

TOKEN = "test-token"
FILE_LIMIT = 256  # the collector's soft and hard limit in the flood test: the flood exceeds it
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x4, 0x6, 0x7, 0x8


def _start_collector(tmp_path: Path, db_url: str, *flags: str, file_limit: int | None = None) -> tuple[subprocess.Popen, int, Path]:
    port = free_port()
    log_path = tmp_path / "collector.log"

    command = [sys.executable, "-m", "fleetscope.cli", "collector", "--listen", f"127.0.0.1:{port}", "--db", db_url,
               "--token", TOKEN, "--grace", "2s", *flags]
    if file_limit is not None:
        # Soft and hard limit, set by the shell that then becomes the collector: it cannot raise it past
        # the hard limit. Not a preexec_fn: that makes Python fork() and run the at-fork handlers of this
        # process's gRPC in the child, which aborted it (SIGABRT, "Check failed: next_worker->state ==
        # KICKED") when an earlier test's gRPC threads were still running in this process.
        command = ["sh", "-c", f'ulimit -n {int(file_limit)} && exec "$@"', "sh", *command]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def listening() -> bool:
        assert proc.poll() is None, log_path.read_text()[-2000:]
        return "collector listening" in log_path.read_text()

    wait_until(listening, timeout_s=60, message="collector listening")
    return proc, port, log_path


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _hpack_literal(name: str, value: str) -> bytes:
    """A header as "literal without indexing, new name" (RFC 7541 6.2.2); short strings only."""
    n, v = name.encode(), value.encode()
    assert len(n) < 127 and len(v) < 127
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def _read_frame(sock: socket.socket) -> tuple[int, int, int, bytes] | None:
    """One frame, or None at the end of the connection."""
    header = _recv_exactly(sock, 9)
    if header is None:
        return None
    length = int.from_bytes(header[:3], "big")
    payload = _recv_exactly(sock, length) if length else b""
    if payload is None:
        return None
    return header[3], header[4], int.from_bytes(header[5:], "big") & 0x7FFFFFFF, payload


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def _closed_by_peer(sockets: list[socket.socket], timeout_s: float) -> list[bytes]:
    """Wait (bounded) until the collector closed every socket; returns what each one received."""
    received = {s.fileno(): b"" for s in sockets}
    open_ = {s.fileno(): s for s in sockets}
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        for s in sockets:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        while open_ and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.5):
                s = open_[key.fd]
                try:
                    chunk = s.recv(65536)
                except (ConnectionResetError, BlockingIOError) as exc:
                    chunk = b"" if isinstance(exc, ConnectionResetError) else None  # type: ignore[assignment]
                if chunk is None:
                    continue
                received[key.fd] += chunk
                if not chunk:
                    sel.unregister(s)
                    del open_[key.fd]
    assert not open_, f"{len(open_)} of {len(sockets)} connections still open after {timeout_s} s"
    return [received[s.fileno()] for s in sockets]


def _frame_kinds(data: bytes) -> set[int]:
    kinds, i = set(), 0
    while i + 9 <= len(data):
        kinds.add(data[i + 3])
        i += 9 + int.from_bytes(data[i : i + 3], "big")
    return kinds


def test_a_flood_of_idle_connections_leaves_room_for_an_agent(tmp_path: Path, sqlite_url: str, processes: list) -> None:
    proc, port, log_path = _start_collector(tmp_path, sqlite_url, "--handshake-timeout", "3s", "--idle-timeout", "3s",
                                            "--keepalive-time", "5m", file_limit=FILE_LIMIT)
    processes.append(proc)
    assert "at most 128 connections" in log_path.read_text(), "the cap keeps 128 of the 256 descriptors for the rest"

    # Ten clients that speak HTTP/2 and then say nothing: closed by the idle timeout (their
    # keepalive is minutes away), with a GOAWAY.
    idle_http2 = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(10)]
    for s in idle_http2:
        s.sendall(PREFACE + _frame(SETTINGS, 0, 0))
    # Three hundred that connect and never send a byte: more than the collector has descriptors.
    flood = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(300)]
    most_open = _open_files(proc.pid)

    agent = make_agent(tmp_path, [f"127.0.0.1:{port}"], CountingSampler(total=200, per_tick=10), name="survivor",
                       backoff_max_s=1.0)
    agent.start()
    try:
        def stored() -> bool:
            nonlocal most_open
            most_open = max(most_open, _open_files(proc.pid))
            return sample_count(sqlite_url, "gpu", device="survivor") >= 200

        wait_until(stored, timeout_s=90, interval_s=0.25, message="the agent's samples stored during the flood")
    finally:
        agent.stop()
    assert most_open < FILE_LIMIT, f"the collector held {most_open} descriptors of {FILE_LIMIT}"

    for reply in _closed_by_peer(idle_http2, timeout_s=60):
        assert GOAWAY in _frame_kinds(reply), "an idle HTTP/2 connection ends with a GOAWAY"
    _closed_by_peer(flood, timeout_s=60)  # the ones over the cap at once, the rest after the handshake timeout
    for s in idle_http2 + flood:
        s.close()

    assert proc.poll() is None, "the collector survived the flood"
    assert "Too many open files" not in log_path.read_text()
    wait_until(lambda: _open_files(proc.pid) < 64, timeout_s=30, message="descriptors released")


def _stall_mid_batch(port: int, message_bytes: int, send_bytes: int) -> socket.socket:
    """A client that opens Ingest/Stream, announces a ``message_bytes`` batch, sends
    ``send_bytes`` of it as HTTP/2 flow control allows, and then stops: it neither sends the
    rest nor answers the collector's pings (a frozen process, a dead link)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    headers = b"".join(_hpack_literal(k, v) for k, v in [
        (":method", "POST"), (":scheme", "http"), (":path", "/fleetscope.v1.Ingest/Stream"),
        (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"), ("te", "trailers"),
        ("authorization", f"Bearer {TOKEN}"),
    ])
    s.sendall(PREFACE + _frame(SETTINGS, 0, 0) + _frame(HEADERS, 0x4, 1, headers))
    body = b"\x00" + struct.pack(">I", message_bytes) + b"\x00" * (send_bytes - 5)
    conn_window = stream_window = 65_535
    sent = 0
    deadline = time.monotonic() + 30
    while sent < len(body) and time.monotonic() < deadline:
        while conn_window > 0 and stream_window > 0 and sent < len(body):
            n = min(16_384, conn_window, stream_window, len(body) - sent)
            s.sendall(_frame(DATA, 0, 1, body[sent : sent + n]))
            sent += n
            conn_window -= n
            stream_window -= n
        if sent >= len(body):
            break
        frame = _read_frame(s)  # wait for the collector to open the window further
        assert frame is not None, "the collector closed the connection before the stall"
        kind, flags, stream, payload = frame
        if kind == SETTINGS and not flags & 0x1:
            for i in range(0, len(payload), 6):
                if int.from_bytes(payload[i : i + 2], "big") == 0x4:  # SETTINGS_INITIAL_WINDOW_SIZE
                    stream_window += int.from_bytes(payload[i + 2 : i + 6], "big") - 65_535
            s.sendall(_frame(SETTINGS, 0x1, 0))
        elif kind == PING and not flags & 0x1:
            s.sendall(_frame(PING, 0x1, 0, payload))  # answered while sending; never once stalled
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
            if stream == 0:
                conn_window += increment
            else:
                stream_window += increment
    return s


def test_clients_stalled_mid_batch_do_not_pin_memory(tmp_path: Path, sqlite_url: str, processes: list) -> None:
    proc, port, _ = _start_collector(tmp_path, sqlite_url, "--keepalive-time", "2s", "--keepalive-timeout", "2s",
                                     "--max-batch-size", "8MiB")
    processes.append(proc)
    before = _rss_bytes(proc.pid)
    clients = 20
    stalled = [_stall_mid_batch(port, message_bytes=8 << 20, send_bytes=6 << 20) for _ in range(clients)]
    grown = _rss_bytes(proc.pid) - before
    # What gRPC buffers is bounded by the announced batch (one per stream, at most the largest
    # batch accepted); a generous margin for the allocator and the interpreter.
    assert grown < clients * (8 << 20) + (128 << 20), f"RSS grew by {grown >> 20} MiB for {clients} stalled clients"
    _closed_by_peer(stalled, timeout_s=60)  # unanswered keepalive pings end each connection
    for s in stalled:
        s.close()
    assert proc.poll() is None
