"""The kernel log (Xid, OOM killer, NVRM, nvgpu) as LogEvents, read without blocking the loop.

Where ``/dev/kmsg`` can be opened it is read directly, non-blocking and from its end (messages
from before the agent started are not news); else ``journalctl -k -f`` is followed (a container
without /dev/kmsg, a host with ``kernel.dmesg_restrict`` and no CAP_SYSLOG but journal access);
else a warning says once that no kernel log is readable and ``poll`` returns nothing.

/dev/kmsg (Documentation/ABI/testing/dev-kmsg): every read() returns one record
``PRI,SEQ,TS_USEC,FLAGS[,more fields];message\\n`` followed by continuation lines that start
with a space and carry ``KEY=value`` context (dropped here). Non-printable bytes and ``\\`` in the
message are escaped as ``\\xNN``. read() fails with EAGAIN when nothing is left and with EPIPE
when records were overwritten before we read them (the next read() goes on after the gap).
The same parser reads a regular file or a FIFO holding such records (recorded data, tests): those
hand over many records per read(), so the bytes are split into lines and partial lines wait.

TS_USEC is the kernel's clock since boot (CLOCK_MONOTONIC's base); it becomes wall time with the
boot time ``time.time_ns() - time.monotonic_ns()``, taken at each poll so an NTP step (a drone
without a real-time clock boots in 1970) is followed. That beats /proc/stat ``btime``, which
has whole seconds and counts time spent suspended, which the kernel's log clock does not.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetscope.agent.logs._base import DEFAULT_JOURNALCTL, priority_level
from fleetscope.agent.logs.files import guess_level
from fleetscope.agent.records import LogEvent

if TYPE_CHECKING:  # the journal reader is imported only where /dev/kmsg cannot be read (_start_journal)
    from fleetscope.agent.logs.journal import JournalctlProcess, JournalEntry

log = logging.getLogger(__name__)

__all__ = ["KERNEL_JOURNAL_ARGS", "KernelLogSource", "KernelLogStats", "KmsgRecord", "parse_kmsg_record"]

DEFAULT_KMSG = "/dev/kmsg"
KERNEL_JOURNAL_ARGS: tuple[str, ...] = ("-k", "-f", "-o", "json", "--all", "--no-pager", "--since", "now")
SOURCE_KMSG = "kmsg"
SOURCE_JOURNAL = "journal:kernel"

# One /dev/kmsg record is at most ~8 KiB (CONSOLE_EXT_LOG_MAX) plus its context lines; a read
# with a smaller buffer fails with EINVAL, so ask for plenty. Files and FIFOs are read in chunks
# of this size.
_READ_SIZE = 1 << 16
_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})")


def _boot_wall_ns() -> int:
    return time.time_ns() - time.monotonic_ns()


@dataclass(frozen=True)
class KmsgRecord:
    priority: int  # the syslog PRI: facility << 3 | level
    seq: int
    ts_usec: int  # since boot
    message: str


def _unescape(raw: bytes) -> bytes:
    return _ESCAPE.sub(lambda m: bytes((int(m.group(1), 16),)), raw) if b"\\x" in raw else raw


def parse_kmsg_record(line: bytes) -> KmsgRecord | None:
    """One record line (without its newline); None when the line is not in the kmsg format."""
    head, sep, body = line.partition(b";")
    if not sep:
        return None
    fields = head.split(b",")
    if len(fields) < 3:
        return None
    try:
        pri, seq, ts = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        return None
    # The escapes stand for bytes: a UTF-8 name arrives as \xNN per byte, so decode after.
    return KmsgRecord(pri, seq, ts, _unescape(body).decode("utf-8", errors="replace"))


@dataclass(frozen=True)
class KernelLogStats:
    mode: str  # "kmsg", "journal" or "none"
    records: int  # events returned so far
    overwritten: int  # reads that failed with EPIPE: the ring buffer overran us
    missed_records: int  # sequence numbers skipped over: how many records those overruns cost
    malformed: int  # lines that were not kmsg records (passed on as plain text)


class KernelLogSource:
    """The kernel log, from ``kmsg_path`` or else from ``journalctl_cmd`` + ``-k -f -o json``.

    ``journalctl_cmd=None`` turns the fallback off. ``start_at_end=False`` reads a recorded file
    from its start. ``boot_wall_ns`` returns the wall time of boot in ns (a parameter for tests).
    """

    name = "kernel"

    def __init__(
        self,
        *,
        kmsg_path: str = DEFAULT_KMSG,
        journalctl_cmd: Sequence[str] | None = DEFAULT_JOURNALCTL,
        start_at_end: bool = True,
        boot_wall_ns: Callable[[], int] = _boot_wall_ns,
        max_records_per_poll: int = 10000,
        max_message_chars: int = 16384,
    ) -> None:
        self._kmsg_path = kmsg_path
        self._journalctl_cmd = list(journalctl_cmd) if journalctl_cmd else None
        self._boot_wall_ns = boot_wall_ns
        self._max_records = max_records_per_poll
        self._max_message = max_message_chars
        self._fd: int | None = None
        self._journal: JournalctlProcess | None = None
        self._pending = b""  # a partial line from a file or FIFO
        self._backlog: collections.deque[bytes] = collections.deque()  # lines read, not yet returned
        self._last_seq: int | None = None
        self._records = self._overwritten = self._missed = self._malformed = 0
        self._why_not: list[str] = []
        self._said = False
        self._closed = False
        self._fd = self._open_kmsg(start_at_end)
        if self._fd is None:
            self._start_journal()

    # -- choosing a reader ------------------------------------------------------------------

    @property
    def mode(self) -> str:
        if self._fd is not None:
            return "kmsg"
        return "journal" if self._journal is not None else "none"

    def _open_kmsg(self, start_at_end: bool) -> int | None:
        try:
            fd = os.open(self._kmsg_path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            self._why_not.append(f"{self._kmsg_path}: {exc.strerror or exc}")
            return None
        if start_at_end:
            try:
                os.lseek(fd, 0, os.SEEK_END)
            except OSError:
                pass  # a FIFO cannot seek: it only carries what is written after we opened it
        return fd

    def _start_journal(self) -> None:
        if self._journalctl_cmd is None:
            self._why_not.append("the journalctl fallback is off")
        else:
            from fleetscope.agent.logs.journal import JournalctlProcess

            argv = self._journalctl_cmd + list(KERNEL_JOURNAL_ARGS)
            try:
                self._journal = JournalctlProcess(argv, max_message_chars=self._max_message)
                return
            except OSError as exc:
                self._why_not.append(f"{argv[0]}: {exc.strerror or exc}")
        self._say_unreadable()

    def _say_unreadable(self) -> None:
        if not self._said:
            self._said = True
            log.warning(
                "no kernel log is readable (%s): GPU Xid and OOM-killer messages will not be reported",
                "; ".join(self._why_not),
            )

    # -- polling ----------------------------------------------------------------------------

    def poll(self, now_ns: int | None = None) -> list[LogEvent]:
        """Kernel messages since the last poll (at most ``max_records_per_poll``); never waits."""
        if self._closed:
            return []
        now_ns = now_ns if now_ns is not None else time.time_ns()
        if self._fd is not None:
            events = self._poll_kmsg(now_ns)
        elif self._journal is not None:
            events = self._poll_journal(now_ns)
        else:
            events = []
        self._records += len(events)
        return events

    def _poll_kmsg(self, now_ns: int) -> list[LogEvent]:
        boot_ns = self._boot_wall_ns()
        events: list[LogEvent] = []
        reads = 0
        while self._fd is not None and len(events) < self._max_records:
            if not self._backlog:
                if reads >= self._max_records:
                    break  # a flood of empty or context lines must not hold the loop either
                reads += 1
                chunk = self._read_chunk()
                if not chunk:
                    break
                self._backlog.extend(self._lines(chunk))
                continue
            line = self._backlog.popleft()
            if not line or line[:1] == b" ":
                continue  # a continuation line: KEY=value context for the record before it
            event = self._event_of(line, now_ns, boot_ns)
            if event is not None:
                events.append(event)
        return events

    def _read_chunk(self) -> bytes:
        """One read(): a record (the device) or a chunk (file, FIFO); b"" when nothing is left now."""
        while True:
            try:
                return self._read_once()
            except BlockingIOError:
                return b""  # EAGAIN: no more records for now
            except BrokenPipeError:
                # EPIPE: records were overwritten before we read them; the next read goes on
                # after the gap, and the sequence numbers tell how many were lost.
                self._overwritten += 1
            except OSError as exc:
                self._kmsg_failed(exc)
                return b""

    def _read_once(self) -> bytes:
        assert self._fd is not None
        return os.read(self._fd, _READ_SIZE)

    def _kmsg_failed(self, exc: OSError) -> None:
        # Some sandboxes (gVisor, some containers) open /dev/kmsg but refuse to read it.
        log.warning(
            "reading %s failed (%s); trying the journal instead", self._kmsg_path, exc.strerror or exc
        )
        self._why_not.append(f"{self._kmsg_path}: read failed: {exc.strerror or exc}")
        self._close_fd()
        self._start_journal()

    def _lines(self, chunk: bytes) -> list[bytes]:
        data = self._pending + chunk
        lines = data.split(b"\n")
        self._pending = lines.pop()
        if len(self._pending) > _READ_SIZE:  # a file without newlines must not grow us forever
            lines.append(self._pending)
            self._pending = b""
        return lines

    def _event_of(self, line: bytes, now_ns: int, boot_ns: int) -> LogEvent | None:
        rec = parse_kmsg_record(line)
        if rec is None:
            # Not a record (a dmesg dump given as kmsg_path, say): keep the text rather than lose it.
            self._malformed += 1
            text = line.decode("utf-8", errors="replace").rstrip("\r")[: self._max_message]
            return LogEvent(now_ns, SOURCE_KMSG, text, guess_level(text)) if text else None
        self._count_gap(rec.seq)
        if not rec.message:
            return None
        return LogEvent(
            ts_ns=now_ns,
            source=SOURCE_KMSG,
            message=rec.message[: self._max_message],
            level=priority_level(rec.priority),
            parsed_ts_ns=boot_ns + rec.ts_usec * 1000,
        )

    def _count_gap(self, seq: int) -> None:
        if self._last_seq is not None and seq > self._last_seq + 1:
            self._missed += seq - self._last_seq - 1
        if self._last_seq is None or seq > self._last_seq:
            self._last_seq = seq

    def _poll_journal(self, now_ns: int) -> list[LogEvent]:
        assert self._journal is not None
        events = [self._journal_event(e, now_ns) for e in self._journal.drain(self._max_records)]
        if not events:
            why = self._journal.ended()
            if why is not None:
                self._why_not.append(why)
                self._journal.close()
                self._journal = None
                self._say_unreadable()
        return events

    @staticmethod
    def _journal_event(entry: JournalEntry, now_ns: int) -> LogEvent:
        # Kernel priorities are set by the code that printed the line: no guessing from words.
        return LogEvent(
            ts_ns=now_ns,
            source=SOURCE_JOURNAL,
            message=entry.message,
            level=priority_level(entry.priority if entry.priority is not None else 6),
            parsed_ts_ns=entry.realtime_us * 1000 if entry.realtime_us is not None else None,
        )

    # -- the rest ---------------------------------------------------------------------------

    def stats(self) -> KernelLogStats:
        return KernelLogStats(self.mode, self._records, self._overwritten, self._missed, self._malformed)

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self._closed = True
        self._close_fd()
        if self._journal is not None:
            self._journal.close()
            self._journal = None
