"""The metrics listener serves a body given as chunks (``/metrics/fleet``: hundreds of MB at
10,000 devices, written family by family instead of joined into one buffer): the client gets
every chunk in order, under a Content-Length that counts them all."""

from __future__ import annotations

import urllib.request

import pytest

from fleetscope.collector.observability.http import MetricsHttpServer


@pytest.mark.server
def test_a_body_of_chunks_arrives_whole_with_its_length() -> None:
    chunks = [b"# HELP a x\n# TYPE a gauge\n", b"a{k=\"1\"} 1\n" * 1000, b"", b"b 2\n"]
    server = MetricsHttpServer(
        "127.0.0.1:0", {"/chunks": lambda: (200, "text/plain", chunks), "/bytes": lambda: (200, "text/plain", b"one\n")}
    ).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/chunks", timeout=10) as r:
            assert int(r.headers["Content-Length"]) == sum(map(len, chunks))
            assert r.read() == b"".join(chunks)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/bytes", timeout=10) as r:
            assert r.headers["Content-Length"] == "4" and r.read() == b"one\n"
    finally:
        server.stop()
