"""Is the database reachable? A cheap periodic probe, for the gRPC health service and ``/readyz``.

One thread runs ``SELECT 1`` every ``interval_s``. The database counts as reachable while the
last probe succeeded and is recent: a probe that hangs (a server that stopped answering
without closing the connection) ages past ``stale_s`` and reads as unreachable, so the
answer never waits on the database itself.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import Engine, text

log = logging.getLogger(__name__)


class DatabaseProbe:
    def __init__(self, engine: Engine, *, interval_s: float = 2.0, stale_s: float | None = None) -> None:
        self._engine = engine
        self.interval_s = interval_s
        self.stale_s = stale_s if stale_s is not None else max(3 * interval_s, interval_s + 5.0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_ok: float | None = None
        self._last_ok_probe = False
        self.failures = 0  # probes that failed, for the self-metrics
        self.last_error = ""

    def probe_once(self) -> bool:
        try:
            with self._engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as exc:
            self.failures += 1
            if self._last_ok_probe or not self.last_error:
                log.warning("database unreachable: %s", exc)
            self.last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self._last_ok_probe = False
            return False
        if not self._last_ok_probe and self.last_error:
            log.info("database reachable again")
        self._last_ok = time.monotonic()
        self._last_ok_probe = True
        return True

    @property
    def reachable(self) -> bool:
        return self._last_ok_probe and self._last_ok is not None and time.monotonic() - self._last_ok <= self.stale_s

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.probe_once()
            self._stop.wait(self.interval_s)

    def start(self) -> DatabaseProbe:
        self.probe_once()
        self._thread = threading.Thread(target=self._loop, name="fleetscope-db-probe", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)


__all__ = ["DatabaseProbe"]
