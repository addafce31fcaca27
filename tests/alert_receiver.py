"""A webhook receiver on loopback for the alerting tests and benchmark: records every POST it
answers, and can be told to refuse (answer 503) or be down (port closed) for a while."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """``http://127.0.0.1:PORT/...``: ``received`` holds (monotonic time, path, body, headers) per accepted POST."""

    def __init__(self, port: int = 0) -> None:
        self.received: list[tuple[float, str, Any, dict[str, str]]] = []
        self.refused = 0
        self.status = 200
        self.lock = threading.Lock()
        self.event = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = port
        self.start()

    def start(self) -> Receiver:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server interface
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                at = time.monotonic()
                with outer.lock:
                    status = outer.status
                    if status < 300:
                        outer.received.append((at, self.path, json.loads(raw), dict(self.headers)))
                        outer.event.set()
                    else:
                        outer.refused += 1
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def bodies(self) -> list[Any]:
        with self.lock:
            return [b for _, _, b, _ in self.received]
