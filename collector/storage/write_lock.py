"""One SQLite writer at a time, handed over at once: a blocking file lock beside the database.

SQLite lets one connection write at a time. A connection that finds the database locked
waits in SQLite's busy handler, which polls with sleeps of up to 100 ms, so a party that
writes back to back (the rollup job's chunks, a second collector worker) can keep another
waiting for as long as it keeps writing: a rollup pass stalled ingest for seconds. Every
party that writes in bulk takes this lock (``flock`` on ``<database>.writer-lock``) around its
transaction instead. The kernel wakes a waiter the moment the lock is released, whichever
thread or process holds it. Locks on separate opens of the file exclude each other, so two
threads of one process each open their own.

PostgreSQL, an in-memory database, or a folder the collector cannot write to get a lock that
does nothing: the database's own locking is all there is.
"""

from __future__ import annotations

import fcntl
import os
from types import TracebackType

from sqlalchemy import Engine


class WriteLock:
    """Held with ``with``; one holder at a time per instance, so each thread has its own.

    The lock file is opened on entry and closed on exit (which releases the lock): a couple of
    system calls per transaction, and nothing for its owner to keep open or close."""

    def __init__(self, engine: Engine) -> None:
        path = engine.url.database if engine.dialect.name == "sqlite" else None
        self._path = path + ".writer-lock" if path and path != ":memory:" else None
        self._fd: int | None = None

    def __enter__(self) -> WriteLock:
        if self._path is not None:
            try:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                return self  # a read-only folder: SQLite's own locking only
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file releases its lock
            self._fd = None
