"""The agent's "does the collector use TLS?" hint names TLS only when TLS is the likely cause.

A TLS collector ends a plaintext agent's connection as soon as it opens, on every try. A
collector killed while an agent connects does that once, and the next try is refused. Both
are stood in for here by a TCP listener that closes every connection it accepts (a TLS
server's answer to plaintext HTTP/2, as gRPC reports it: UNAVAILABLE, "Socket closed"): one
that keeps doing it gets the hint, one that does it once and then stops listening does not.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.helpers import CountingSampler, make_agent


class ClosingListener:
    """Accepts connections and closes them at once; after ``accepts`` of them it stops listening."""

    def __init__(self, accepts: int | None) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        self._left = accepts
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self._left is None or self._left > 0:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            # Read what the agent sent first (its HTTP/2 preface), as a TLS server reads a
            # ClientHello: closing with unread bytes would reset the connection instead.
            conn.settimeout(2.0)
            try:
                conn.recv(65536)
            except OSError:
                pass
            conn.close()
            self.accepted += 1
            if self._left is not None:
                self._left -= 1
        self.sock.close()  # the collector is gone: the next tries are refused

    def close(self) -> None:
        self.sock.close()


@pytest.mark.timeout(60)
def test_an_address_that_always_closes_at_once_gets_the_tls_hint(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    listener = ClosingListener(accepts=None)
    agent = make_agent(tmp_path, [listener.address], CountingSampler(total=10, per_tick=5), drain_timeout_s=0.2)
    agent.start()
    try:
        with caplog.at_level(logging.WARNING, logger="fleetscope.agent.daemon.uplink"):
            wait_until(lambda: "TLS" in agent.uplink.status.last_error, 30, message="the TLS hint")
    finally:
        agent.stop()
        listener.close()
    assert listener.accepted >= 2
    assert any("does it use TLS" in r.getMessage() for r in caplog.records)


@pytest.mark.timeout(60)
def test_a_collector_that_dies_while_the_agent_connects_gets_no_tls_hint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    listener = ClosingListener(accepts=1)
    agent = make_agent(tmp_path, [listener.address], CountingSampler(total=10, per_tick=5), drain_timeout_s=0.2)
    with caplog.at_level(logging.INFO, logger="fleetscope.agent.daemon.uplink"):
        agent.start()
        try:
            wait_until(lambda: listener.accepted == 1, 20, message="the one connection the dying collector took")
            time.sleep(3.0)  # several more tries, all refused (backoff: 0.1 s, at most 1 s)
            errors = agent.uplink.status.last_error
        finally:
            agent.stop()
    assert errors and "TLS" not in errors
    messages = [r.getMessage() for r in caplog.records]
    assert any("closed the connection at once" in m for m in messages), messages  # what once led to the hint
    assert not any("TLS" in m for m in messages), messages
