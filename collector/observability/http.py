"""The collector's metrics listener: ``/metrics``, ``/metrics/fleet``, ``/healthz``, ``/readyz``.

A small threaded HTTP server (the standard library's), so that a slow scrape never holds the
gRPC event loop. ``/healthz`` answers 200 while the process serves; ``/readyz`` answers 200
while the database answers the probe, 503 otherwise.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

# A body is bytes, or chunks written one after the other (``/metrics/fleet``: hundreds of MB at
# 10,000 devices, not joined into one buffer first).
Route = Callable[[], tuple[int, str, bytes | Sequence[bytes]]]
TEXT = "text/plain; charset=utf-8"


def parse_listen(text: str, *, default_port: int) -> tuple[str, int]:
    """``"HOST:PORT"``, ``"[::1]:PORT"``, ``":PORT"`` (all interfaces) -> (host, port); ValueError otherwise."""
    text = text.strip()
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (text[end + 1 :] and not text[end + 1 :].startswith(":")):
            raise ValueError(f"not an address: {text!r} (examples: 127.0.0.1:9464, [::1]:9464, :9464)")
        host, port_text = text[1:end], text[end + 2 :]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError(f"not an address: {text!r} (an IPv6 address goes in brackets: [::1]:9464)")
    if port_text:
        if not port_text.isdigit() or int(port_text) > 65535:
            raise ValueError(f"not a port: {port_text!r} in {text!r}")
        return host or "0.0.0.0", int(port_text)
    return host or "0.0.0.0", default_port


class _Handler(BaseHTTPRequestHandler):
    routes: dict[str, Route] = {}

    def do_GET(self) -> None:
        body: bytes | Sequence[bytes]
        route = self.routes.get(self.path.split("?", 1)[0])
        if route is None:
            status, ctype, body = 404, TEXT, ("not found: " + ", ".join(sorted(self.routes)) + "\n").encode()
        else:
            try:
                status, ctype, body = route()
            except Exception as exc:  # a failed scrape answers 500; the collector goes on
                log.warning("%s failed: %s", self.path, exc)
                status, ctype, body = 500, TEXT, f"error: {exc}\n".encode()
        chunks = [body] if isinstance(body, bytes) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(sum(map(len, chunks))))
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(chunk)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("metrics %s: " + format, self.address_string(), *args)


class MetricsHttpServer:
    """Serves ``routes`` on a thread; ``port`` is the bound port (OSError when it cannot bind)."""

    def __init__(self, listen: str, routes: dict[str, Route], *, default_port: int = 9464) -> None:
        host, port = parse_listen(listen, default_port=default_port)
        handler = type("MetricsHandler", (_Handler,), {"routes": dict(routes)})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="fleetscope-metrics-http", daemon=True)

    def start(self) -> MetricsHttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


__all__ = ["MetricsHttpServer", "parse_listen"]
