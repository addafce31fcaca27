"""Following log files as they grow: globs, rotation, truncation, files that appear later.

A file present when the agent starts is followed from its end (its past is not news); a file
that appears later, or the new file after a rotation, is read from its start so nothing
written between two polls is lost. Partial lines wait for their newline, and a line longer
than ``max_line_bytes`` is cut there (the rest of it dropped), so one runaway writer cannot
exhaust a drone's memory. Every line is handed on, blank ones too: the grouper
(``fleetscope.agent.logs.grouping``) reads where blocks end from them, and drops those outside
a block.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import time
from dataclasses import dataclass

from fleetscope.agent.classify._times import iso_ns
from fleetscope.agent.records import LogEvent

log = logging.getLogger(__name__)

_LEVEL_WORDS = (
    ("critical", ("CRITICAL", "FATAL", "PANIC")),
    ("error", ("ERROR", "Error:", "Traceback (most recent call last)", "Exception", "OutOfMemory", "Killed process")),
    ("warning", ("WARNING", "WARN", "Warning:")),
    ("debug", ("DEBUG",)),
)


# A leading ISO 8601 time, as Python's logging, glog-less services, Docker and journal exports print it.
_LEADING_TIME = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?")


def parsed_time_ns(line: str) -> int | None:
    """The time printed at the start of ``line`` (a zoneless time is read as UTC), or None."""
    if not line[:1].isdigit():  # most lines: one character test, no regex
        return None
    m = _LEADING_TIME.match(line)
    return iso_ns(m.group(0)) if m else None


def guess_level(line: str) -> str:
    """A level from the words a line carries; plain lines are "info"."""
    for level, words in _LEVEL_WORDS:
        for w in words:
            if w in line:
                return level
    return "info"


@dataclass
class _OpenFile:
    path: str
    inode: int
    offset: int
    pending: bytes = b""
    cutting: bool = False  # the line being read was cut at max_line_bytes: its rest is dropped


class FileFollower:
    name = "files"

    def __init__(self, patterns: list[str], *, max_line_bytes: int = 16384, read_limit_bytes: int = 1 << 20) -> None:
        self._patterns = list(patterns)
        self._max_line = max_line_bytes
        self._read_limit = read_limit_bytes  # per file per poll: a huge backlog is read over several polls
        self._files: dict[str, _OpenFile] = {}
        self._warned: set[str] = set()
        for path in self._expand():
            self._track(path, from_end=True)
        for pattern in self._patterns:  # said once: a file that appears later is followed all the same
            if not any(os.path.isfile(m) for m in (glob.glob(pattern) if glob.has_magic(pattern) else [pattern])):
                what = "matches no file" if glob.has_magic(pattern) else "does not exist"
                self._warn_once("missing:" + pattern, f"--log-file {pattern} {what} yet: it will be followed from "
                                                      "its start when it appears")

    def _expand(self) -> list[str]:
        out: list[str] = []
        for pattern in self._patterns:
            matches = glob.glob(pattern) if glob.has_magic(pattern) else [pattern]
            out.extend(m for m in matches if os.path.isfile(m))
        return out

    def _track(self, path: str, *, from_end: bool) -> None:
        try:
            st = os.stat(path)
        except OSError:
            return
        self._files[path] = _OpenFile(path, st.st_ino, st.st_size if from_end else 0)

    def poll(self, now_ns: int | None = None) -> list[LogEvent]:
        """Lines written since the last poll, in file order."""
        now_ns = now_ns if now_ns is not None else time.time_ns()
        for path in self._expand():
            if path not in self._files:
                self._track(path, from_end=False)
        events: list[LogEvent] = []
        for state in list(self._files.values()):
            events.extend(self._read_new(state, now_ns))
        return events

    def _read_new(self, state: _OpenFile, now_ns: int) -> list[LogEvent]:
        try:
            st = os.stat(state.path)
        except FileNotFoundError:
            return []  # rotated away and not yet recreated: pick up the new file when it appears
        except OSError as exc:
            self._warn_once(state.path, f"cannot stat {state.path}: {exc}")
            return []
        if st.st_ino != state.inode:
            state.inode, state.offset, state.pending, state.cutting = st.st_ino, 0, b"", False
        elif st.st_size < state.offset:
            log.info("%s was truncated; reading it from the start", state.path)
            state.offset, state.pending, state.cutting = 0, b"", False
        if st.st_size == state.offset:
            return []
        try:
            with open(state.path, "rb") as f:
                f.seek(state.offset)
                chunk = f.read(self._read_limit)
        except OSError as exc:
            self._warn_once(state.path, f"cannot read {state.path}: {exc}")
            return []
        state.offset += len(chunk)
        data = state.pending + chunk
        if state.cutting:
            end = data.find(b"\n")
            if end < 0:
                return []  # still the rest of the cut line
            data, state.cutting = data[end + 1 :], False
        lines = data.split(b"\n")
        state.pending = lines.pop()
        if len(state.pending) > self._max_line:
            lines.append(state.pending)
            state.pending, state.cutting = b"", True
        out = []
        for raw in lines:
            if len(raw) > self._max_line:
                raw = raw[: self._max_line]
            text = raw.decode("utf-8", errors="replace").rstrip("\r")
            # Blank lines too: a blank line ends some blocks (trtexec sections, a traceback's
            # frames), and the grouper, which drops the blank lines outside a block, reads them.
            out.append(LogEvent(ts_ns=now_ns, source=state.path, message=text, level=guess_level(text),
                                parsed_ts_ns=parsed_time_ns(text)))
        return out

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message)

    def close(self) -> None:
        self._files.clear()
