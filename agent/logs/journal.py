"""Following the systemd journal through ``journalctl -f -o json``, without blocking the agent.

``journalctl`` runs as a child process; a daemon thread reads its JSON lines, turns each into a
small :class:`JournalEntry` and puts it in a bounded queue that ``poll`` drains without waiting.
When the queue is full the thread waits instead of dropping: journalctl then blocks on its full
pipe, which loses nothing because the journal keeps the entries on disk. Memory stays bounded by
``queue_max`` entries of at most ``max_message_chars`` each.

The JSON format (https://systemd.io/JOURNAL_EXPORT_FORMATS/#journal-json-format): every field is
a string, except that a value with non-printable or non-UTF-8 bytes (a newline included) is an
array of byte values, a field with several values is an array of such values, and a field over
4096 bytes is ``null`` unless ``--all`` is given (we give it, and cut messages ourselves).
``__REALTIME_TIMESTAMP`` is microseconds since the epoch, as a decimal string.

:class:`JournalctlProcess` is shared with :mod:`fleetscope.agent.logs.kernel_log`, which falls back to
``journalctl -k`` where ``/dev/kmsg`` cannot be read.
"""

from __future__ import annotations

import collections
import fnmatch
import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from fleetscope.agent.logs._base import DEFAULT_JOURNALCTL, priority_level
from fleetscope.agent.logs.files import guess_level
from fleetscope.agent.records import LogEvent
from fleetscope.proto.vocabulary import LOG_LEVEL_RANK

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_JOURNALCTL",
    "JournalEntry",
    "JournalSource",
    "JournalctlProcess",
    "field_text",
    "parse_entry",
    "priority_level",
]

# "--since now": the agent reports what happens while it runs; the journal's past is not news.
# "--all": without it, -o json turns fields over 4096 bytes into null and the message is lost.
FOLLOW_ARGS: tuple[str, ...] = ("-f", "-o", "json", "--all", "--no-pager", "--since", "now")

_LEVEL_RANK = LOG_LEVEL_RANK
_DEFAULT_PRIORITY = 6  # what journald assigns to a service's stdout when nothing says otherwise

# Fields that name the unit an entry belongs to, most specific first: a service's own output
# carries _SYSTEMD_UNIT; systemd's messages *about* it ("Main process exited, code=killed") carry
# UNIT; user services the USER_ variants.
_UNIT_FIELDS = ("_SYSTEMD_UNIT", "UNIT", "_SYSTEMD_USER_UNIT", "USER_UNIT")

_STOP_WAIT_S = 2.0  # how long close() waits for journalctl to exit before killing it
_STDERR_LINES = 5  # lines of journalctl's stderr kept to explain why it ended


def more_severe(a: str, b: str) -> str:
    return a if _LEVEL_RANK.get(a, 1) >= _LEVEL_RANK.get(b, 1) else b


@dataclass(frozen=True)
class JournalEntry:
    """What the agent keeps of one journal entry (the rest of its ~30 fields is dropped early)."""

    message: str
    priority: int | None
    realtime_us: int | None
    units: tuple[str, ...] = ()  # values of _UNIT_FIELDS present, in that order


def _bytes_text(values: list[int]) -> str:
    return bytes(v & 0xFF for v in values).decode("utf-8", errors="replace")


def field_text(value: object) -> str | None:
    """One field's JSON value as text: a string, a byte array, or several values joined by newlines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        if all(isinstance(v, int) for v in value):
            return _bytes_text(value)
        parts = [field_text(v) for v in value]
        kept = [p for p in parts if p is not None]
        return "\n".join(kept) if kept else None
    return None  # null: a field too large for the serializer; or a type the format never uses


def _int_field(value: object) -> int | None:
    text = field_text(value)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def parse_entry(obj: object, *, max_message_chars: int = 16384) -> JournalEntry | None:
    """A JournalEntry from one decoded JSON line; None when it carries no message."""
    if not isinstance(obj, dict):
        return None
    message = field_text(obj.get("MESSAGE"))
    if message is None:
        return None
    # journald strips a line's newline, but a message sent whole (sd_journal_print) may end in one.
    message = message.rstrip("\r\n")[:max_message_chars]
    if not message:
        return None
    units = tuple(u for u in (field_text(obj.get(f)) for f in _UNIT_FIELDS) if u)
    return JournalEntry(
        message, _int_field(obj.get("PRIORITY")), _int_field(obj.get("__REALTIME_TIMESTAMP")), units
    )


class JournalctlProcess:
    """``journalctl`` (any argv) in a child process, its JSON lines read on a daemon thread.

    The constructor starts the process and raises ``OSError`` when it cannot be started.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        queue_max: int = 4096,
        max_line_bytes: int = 1 << 20,
        max_message_chars: int = 16384,
    ) -> None:
        self.argv = list(argv)
        self._max_line = max_line_bytes
        self._max_message = max_message_chars
        self._queue: queue.Queue[JournalEntry] = queue.Queue(maxsize=queue_max)
        self._stop = threading.Event()
        self._done = threading.Event()
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self.malformed_lines = 0
        self.oversized_lines = 0
        self._ended: str | None = None
        # A session of its own, so close() can signal everything the command started (a wrapper
        # such as "sudo journalctl" forks) and not only the first process.
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._pump, name="fleetscope-journalctl", daemon=True)
        self._err_reader = threading.Thread(
            target=self._pump_stderr, name="fleetscope-journalctl-err", daemon=True
        )
        self._reader.start()
        self._err_reader.start()

    # -- the reader threads -----------------------------------------------------------------

    def _pump(self) -> None:
        stream = self._proc.stdout
        assert stream is not None
        try:
            while not self._stop.is_set():
                line = stream.readline(self._max_line + 1)
                if not line:
                    return  # EOF: journalctl ended
                if len(line) > self._max_line and not line.endswith(b"\n"):
                    self.oversized_lines += 1  # a cut JSON line cannot be parsed: skip all of it
                    self._skip_rest_of_line(stream)
                    continue
                entry = self._parse(line)
                if entry is not None and not self._put(entry):
                    return
        except (OSError, ValueError):
            return  # the pipe was closed under us at shutdown
        finally:
            self._done.set()

    def _skip_rest_of_line(self, stream: IO[bytes]) -> None:
        while not self._stop.is_set():
            chunk = stream.readline(self._max_line)
            if not chunk or chunk.endswith(b"\n"):
                return

    def _parse(self, line: bytes) -> JournalEntry | None:
        if not line.strip():
            return None
        try:
            obj = json.loads(line)
        except ValueError:
            self.malformed_lines += 1
            return None
        return parse_entry(obj, max_message_chars=self._max_message)

    def _put(self, entry: JournalEntry) -> bool:
        # Wait rather than drop (see the module docstring), but wake up to notice close().
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _pump_stderr(self) -> None:
        stream = self._proc.stderr
        assert stream is not None
        try:
            for raw in iter(lambda: stream.readline(4096), b""):
                text = raw.decode("utf-8", errors="replace").strip()
                if text:
                    self._stderr.append(text[:500])
        except (OSError, ValueError):
            return

    # -- what the poll loop calls -----------------------------------------------------------

    def drain(self, limit: int) -> list[JournalEntry]:
        """Entries read so far, at most ``limit``; never waits."""
        out: list[JournalEntry] = []
        while len(out) < limit:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return out

    def ended(self) -> str | None:
        """None while journalctl runs or entries wait; once it ended, why (status and stderr)."""
        if self._ended is not None:
            return self._ended
        if not self._done.is_set() or not self._queue.empty() or self._stop.is_set():
            return None
        # Its stdout is closed, so it is exiting: these waits are short and happen once.
        try:
            rc: int | None = self._proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            rc = None
        self._err_reader.join(0.2)
        said = "; ".join(self._stderr)
        self._ended = f"{self.argv[0]} ended (exit status {rc})" + (f": {said}" if said else "")
        return self._ended

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=_STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self._proc.wait()
        self._reader.join(_STOP_WAIT_S)
        self._err_reader.join(_STOP_WAIT_S)
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()

    def _signal(self, sig: int) -> None:
        # Only while our child runs (checked by the caller): its process group is then surely ours.
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:  # e.g. a setuid wrapper: signal the one process we may
            self._proc.send_signal(sig)


def _unit_names(unit: str) -> tuple[str, ...]:
    # journalctl -u appends ".service" to a name without a unit type; entries carry the full name.
    return (unit,) if "." in unit else (unit, unit + ".service")


class JournalSource:
    """``journalctl -f -o json -u UNIT...``: lines of the named systemd units, as LogEvents.

    Each event's source is ``journal:UNIT`` with UNIT spelled as given here (a glob pattern
    gives the matching unit's full name), so the grouper keeps two units' lines apart.
    ``journalctl_cmd`` is the program (with any leading arguments, e.g. a wrapper); the follow
    and ``-u`` arguments are appended to it.
    """

    name = "journal"

    def __init__(
        self,
        units: Sequence[str],
        *,
        journalctl_cmd: Sequence[str] = DEFAULT_JOURNALCTL,
        max_events_per_poll: int = 10000,
        queue_max: int = 4096,
        max_message_chars: int = 16384,
        max_line_bytes: int = 1 << 20,
    ) -> None:
        self.units = [u for u in units if u]
        if not self.units:
            raise ValueError(
                "JournalSource needs at least one unit (without -u journalctl follows everything)"
            )
        self._max_events = max_events_per_poll
        self._exact: dict[str, str] = {}
        self._globs: list[str] = []
        for unit in self.units:
            if any(c in unit for c in "*?["):
                self._globs.append(unit)
            for full in _unit_names(unit):
                self._exact.setdefault(full, f"journal:{unit}")
        argv = list(journalctl_cmd) + list(FOLLOW_ARGS)
        for unit in self.units:
            argv += ["-u", unit]
        self._said = False
        self._proc: JournalctlProcess | None = None
        try:
            self._proc = JournalctlProcess(
                argv, queue_max=queue_max, max_line_bytes=max_line_bytes, max_message_chars=max_message_chars
            )
        except OSError as exc:
            self._say(f"cannot start {argv[0]}: {exc.strerror or exc}")

    def poll(self, now_ns: int | None = None) -> list[LogEvent]:
        """Entries journalctl printed since the last poll (at most ``max_events_per_poll``)."""
        if self._proc is None:
            return []
        now_ns = now_ns if now_ns is not None else time.time_ns()
        events = [self._event(e, now_ns) for e in self._proc.drain(self._max_events)]
        if not events:
            why = self._proc.ended()
            if why is not None:
                self._say(why)
        return events

    def _event(self, entry: JournalEntry, now_ns: int) -> LogEvent:
        return LogEvent(
            ts_ns=now_ns,
            source=self._source_of(entry),
            message=entry.message,
            level=self._level_of(entry),
            parsed_ts_ns=entry.realtime_us * 1000 if entry.realtime_us is not None else None,
        )

    def _source_of(self, entry: JournalEntry) -> str:
        for unit in entry.units:
            name = self._exact.get(unit)
            if name is not None:
                return name
            if any(fnmatch.fnmatchcase(unit, g) for g in self._globs):
                return f"journal:{unit}"
        # Nothing names a followed unit (journalctl matched on something else): the first unit
        # field is still the most telling name, else the one unit followed.
        return f"journal:{entry.units[0] if entry.units else self.units[0]}"

    @staticmethod
    def _level_of(entry: JournalEntry) -> str:
        level = priority_level(entry.priority if entry.priority is not None else _DEFAULT_PRIORITY)
        if level == "info":
            # A service's stdout is logged at priority 6 whatever it says, so a Python
            # "ERROR ..." line or a traceback would read as info: the words may raise it.
            level = more_severe(guess_level(entry.message), level)
        return level

    def _say(self, why: str) -> None:
        if not self._said:
            self._said = True
            log.warning("journal of %s is not followed: %s", ", ".join(self.units), why)

    def close(self) -> None:
        if self._proc is not None:
            self._proc.close()
