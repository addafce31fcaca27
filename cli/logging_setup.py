"""Log output for the long-running commands: ``--log-format text`` (the default) or ``json``.

``json`` writes one JSON object per line on stderr: ``ts`` (ISO 8601, UTC, milliseconds),
``level``, ``logger``, ``message``, and ``exception`` (the traceback's text) when there is one.
So that stderr holds nothing but JSON lines, in that mode the process's other stderr output is
turned into records too: a line printed to ``sys.stderr`` (the commands' progress lines) becomes
a record of logger ``fleetscope.stderr``, an uncaught exception (main thread or another) one of
logger ``fleetscope.crash`` with its traceback, and a Python warning one of ``py.warnings``.

The one place logging is set up: ``fleetscope.cli.main`` calls :func:`configure`.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
import threading
from datetime import datetime, timezone
from typing import Any, TextIO

__all__ = ["FORMATS", "JsonFormatter", "TEXT_FORMAT", "add_argument", "configure", "original_stderr", "restore"]

FORMATS = ("text", "json")
ENV = "FLEETSCOPE_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_saved: dict[str, Any] = {}


def add_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-format", choices=FORMATS, default="text",
                   help=f"'json': one JSON object per line on stderr (ts, level, logger, message, exception); "
                        f"default text (env {ENV})")


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, tz=timezone.utc)
        doc: dict[str, Any] = {
            "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exception"] = record.exc_text
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return json.dumps(doc, default=str)


class _StderrLines(io.TextIOBase):
    """``sys.stderr`` in JSON mode: each complete line written becomes a log record."""

    def __init__(self, original: TextIO) -> None:
        super().__init__()
        self._original = original
        self._log = logging.getLogger("fleetscope.stderr")
        self._buf = ""
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        with self._lock:
            self._buf += s
            lines = self._buf.split("\n")
            self._buf = lines.pop()
        for line in lines:
            self._emit(line)
        return len(s)

    def flush(self) -> None:
        pass  # a partial line waits for its end (print() always ends one)

    def fileno(self) -> int:
        return self._original.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._original, "encoding", "utf-8")

    def isatty(self) -> bool:
        return False

    def _emit(self, line: str) -> None:
        line = line.rstrip()
        if not line.strip():
            return
        low = line.lower()
        if low.startswith("warning"):
            level = logging.WARNING
        elif "error" in low or "fatal" in low or "traceback" in low:
            level = logging.ERROR
        else:
            level = logging.INFO
        self._log.log(level, "%s", line.strip())


def configure(level: int, log_format: str = "text") -> None:
    """Set up the root logger (and, for ``json``, the rest of stderr) once per process."""
    if log_format != "json":
        logging.basicConfig(level=level, format=TEXT_FORMAT)
        return
    original = sys.stderr
    if isinstance(original, _StderrLines):  # configured already in this process
        original = original._original
    handler = logging.StreamHandler(original)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.captureWarnings(True)
    crash = logging.getLogger("fleetscope.crash")
    # What a command prints to stderr is shown whatever -v says, as in text mode.
    crash.setLevel(logging.DEBUG)
    logging.getLogger("fleetscope.stderr").setLevel(logging.DEBUG)

    def excepthook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        crash.critical("uncaught %s: %s", exc_type.__name__, exc, exc_info=(exc_type, exc, tb))

    def thread_excepthook(hook_args: Any) -> None:
        if hook_args.exc_type is SystemExit:
            return
        name = hook_args.thread.name if hook_args.thread is not None else "?"
        crash.error("uncaught %s in thread %s: %s", hook_args.exc_type.__name__, name, hook_args.exc_value,
                    exc_info=(hook_args.exc_type, hook_args.exc_value, hook_args.exc_traceback))

    _saved.setdefault("stderr", original)
    _saved.setdefault("excepthook", sys.excepthook)
    _saved.setdefault("threading_excepthook", threading.excepthook)
    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
    sys.stderr = _StderrLines(original)


def original_stderr() -> TextIO:
    """The real stderr, under the JSON mode's line wrapper."""
    err = sys.stderr
    return err._original if isinstance(err, _StderrLines) else err


def restore() -> None:
    """Undo :func:`configure`'s JSON mode (for a command run in-process, as tests do)."""
    if not _saved:
        return
    sys.stderr = _saved.pop("stderr")
    sys.excepthook = _saved.pop("excepthook")
    threading.excepthook = _saved.pop("threading_excepthook")
    logging.captureWarnings(False)
