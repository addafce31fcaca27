"""A hostile rules file and hostile webhook receivers, against real processes: a rules file nested
100,000 deep is one FILE:LINE line from ``fleetscope alerts --check`` and ``fleetscope collector
--alerts``, and at run time the collector logs FILE:LINE and keeps the last good rules; a
receiver that answers with redirects (to another origin, to its own, to ftp://) gets no request
followed: the notifier's ``Authorization`` header never leaves for another address and no
connection is opened to the address a receiver names."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, insert, select

from fleetscope.collector.storage.engine import normalise_url
from fleetscope.collector.storage.schema import Device, notification_attempts, notifications
from tests.conftest import wait_until

CLI = [sys.executable, "-m", "fleetscope.cli"]
DEEP = 100_000


def deep_rules(good: str) -> str:
    """``good`` with a label value nested DEEP arrays deep on its last line."""
    return good + 'labels = { site = ' + "[" * DEEP + "]" * DEEP + " }\n"


GOOD = '[[rule]]\nname = "silent"\nabsent = "1m"\n'


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def test_a_rules_file_nested_100000_deep_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(deep_rules(GOOD))
    line = GOOD.count("\n") + 1
    out = subprocess.run([*CLI, "alerts", "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stdout == ""
    assert _one_line(out.stderr).startswith(f"{path}:{line}: nested deeper than 32 levels")

    db = tmp_path / "x.db"
    out = subprocess.run([*CLI, "collector", "--listen", "127.0.0.1:0", "--db", f"sqlite:///{db}", "--token", "t",
                          "--alerts", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert _one_line(out.stderr) == f"fleetscope collector: {path}:{line}: nested deeper than 32 levels (tables, arrays and dotted keys)"
    assert not db.exists(), "refused before anything started"


def _device(db_url: str, name: str, last_seen_ns: int) -> None:
    """A device the collector has not heard from since ``last_seen_ns`` (an ``absent`` rule's subject)."""
    engine = create_engine(normalise_url(db_url))
    try:
        with engine.begin() as conn:
            conn.execute(insert(Device.__table__).values(agent_id=f"agent-{name}", name=name, first_seen_ns=last_seen_ns,
                                                         last_seen_ns=last_seen_ns, labels={"site": "field"}))
    finally:
        engine.dispose()


def test_a_rules_file_turned_100000_deep_at_run_time_is_logged_with_file_and_line(
    tmp_path: Path, sqlite_url: str, collector_process: Any
) -> None:
    assert subprocess.run([*CLI, "db", "upgrade", "--db", sqlite_url], capture_output=True, timeout=60).returncode == 0
    path = tmp_path / "rules.toml"
    path.write_text(GOOD)
    collector = collector_process(sqlite_url, extra_args=("--alerts", str(path))).start()
    time.sleep(1.5)  # the alert job has read the rules once
    path.write_text(deep_rules(GOOD))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a change the mtime shows, however fast
    wait_until(lambda: "not reloaded" in collector.log_path.read_text(), timeout_s=30, message="the reload refused")
    time.sleep(1.5)  # a few more passes of the alert job on the refused file
    log = collector.log_path.read_text()
    assert f"the last good rules stay in force: {path}:{GOOD.count(chr(10)) + 1}: nested deeper than 32 levels" in log, log[-3000:]
    assert "Traceback" not in log and "RecursionError" not in log, log[-3000:]
    assert log.count("not reloaded") == 1, "logged once per change"
    assert collector.proc.poll() is None


class _Recorder:
    """An HTTP server on loopback that records every request (any method) and answers each path
    as told: ``routes[path] = (status, location)``; unknown paths get 200."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []  # (method, path, headers)
        self.routes: dict[str, tuple[int, str | None]] = {}
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length", "0") or 0)
                if length:
                    self.rfile.read(length)
                with outer.lock:
                    outer.requests.append((self.command, self.path, dict(self.headers)))
                    status, location = outer.routes.get(self.path, (200, None))
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = do_HEAD = _answer  # noqa: N815 - the http.server interface

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Listener:
    """A bare TCP port that counts the connections made to it (an ftp:// target, say)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)

    def stop(self) -> None:
        self._stop.set()
        self.sock.close()
        for c in self._held:
            c.close()


@pytest.fixture
def servers() -> Iterator[tuple[_Recorder, _Recorder, _Listener]]:
    made = (_Recorder(), _Recorder(), _Listener())
    yield made
    for s in made:
        s.stop()


def test_webhook_redirects_are_not_followed(tmp_path: Path, sqlite_url: str, collector_process: Any,
                                            servers: tuple[_Recorder, _Recorder, _Listener]) -> None:
    receiver, elsewhere, ftp = servers
    redirects = {  # notifier -> (status, where the receiver sends it)
        "cross-302": (302, elsewhere.url("/stolen-302")),
        "cross-307": (307, elsewhere.url("/stolen-307")),
        "cross-308": (308, elsewhere.url("/stolen-308")),
        "same-301": (301, receiver.url("/landed")),
        "ftp-302": (302, f"ftp://127.0.0.1:{ftp.port}/x"),
    }
    for name, answer in redirects.items():
        receiver.routes[f"/{name}"] = answer
    notifiers = "".join(f'[[notifier]]\nname = "{name}"\ntype = "webhook"\nurl = "{receiver.url("/" + name)}"\n'
                        f'headers = {{ Authorization = "Bearer s3cret-{name}" }}\ntimeout = "2s"\n\n' for name in redirects)
    path = tmp_path / "rules.toml"
    path.write_text(notifiers + f'[[rule]]\nname = "silent"\nabsent = "1s"\nnotify = {list(redirects)!r}\n'.replace("'", '"'))
    assert subprocess.run([*CLI, "db", "upgrade", "--db", sqlite_url], capture_output=True, timeout=60).returncode == 0
    _device(sqlite_url, "drone-9", time.time_ns() - 3600 * 10**9)
    collector_process(sqlite_url, extra_args=("--alerts", str(path))).start()

    engine = create_engine(normalise_url(sqlite_url))
    try:
        def attempts() -> dict[str, list[tuple[int | None, str]]]:
            with engine.connect() as conn:
                rows = conn.execute(select(notifications.c.notifier, notification_attempts.c.status, notification_attempts.c.error)
                                    .join(notifications, notifications.c.id == notification_attempts.c.notification_id)).all()
            out: dict[str, list[tuple[int | None, str]]] = {}
            for notifier, status, error in rows:
                out.setdefault(notifier, []).append((status, error))
            return out

        wait_until(lambda: set(attempts()) == set(redirects), timeout_s=60, message="an attempt to every notifier")
        time.sleep(1.0)
        seen = attempts()
    finally:
        engine.dispose()
    for name, (status, location) in redirects.items():
        got_status, error = seen[name][0]
        assert got_status == status and f"redirect to '{location}' not followed" in error, (name, seen[name])
    assert elsewhere.requests == [], f"a redirect was followed to another origin: {elsewhere.requests}"
    assert [p for _, p, _ in receiver.requests if p == "/landed"] == [], "a redirect was followed on the same origin"
    assert ftp.accepted == 0, "the collector opened a connection to the address a receiver named"
    assert {p for _, p, _ in receiver.requests} == {f"/{n}" for n in redirects}
