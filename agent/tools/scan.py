"""The offline scanner: find incidents in log files written before the agent was installed.

``fleetscope scan`` runs this over old logs (or logs copied off a drone) with the classifiers the
agent runs (``fleetscope.agent.classify``), so a scan and a live agent agree on what an incident
is. Standard library only, like the rest of the agent: importing the findings into a database is
``fleetscope.collector.ingest.scan_import``'s job.

Events
------
A classifier is given one *event*. A file's lines are grouped into events by
:class:`fleetscope.agent.logs.grouping.LineGrouper`, the agent's own grouper, whose docstring
gives the rules: a Python traceback (with its chained exceptions), a glog block, a kernel OOM
burst, a trtexec performance summary (with the device block before it), a ``kubectl describe``
state block are one event each; any other line is an event of its own; blank lines are none.
A file has no time, so no block is released for waiting: one ends when a line does not continue
it, or at the end of the file. An event is cut at ``MAX_EVENT_LINES`` lines or
``MAX_EVENT_CHARS`` characters (the agent's bounds), so an unterminated block cannot hold a
whole file in memory; a line is cut at ``MAX_LINE_BYTES``, as the agent's file follower cuts it.
Lines are numbered from 1 as editors number them.

Files that start with the gzip magic bytes are decompressed while read (``syslog.2.gz``).
A file that cannot be read gets ``ScanResult.error`` and the scan goes on with the next one.
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import BinaryIO, NamedTuple

from fleetscope.agent.classify import Finding, classify_text, registry
from fleetscope.agent.logs.grouping import MAX_BLOCK_CHARS, MAX_BLOCK_LINES, MAY_OPEN_BLOCK, LineGrouper
from fleetscope.agent.records import FactValue

__all__ = [
    "Event",
    "ScanFinding",
    "ScanResult",
    "iter_events",
    "scan_file",
    "scan_files",
    "MAX_LINE_BYTES",
    "PROGRESS_EVERY_BYTES",
]

MAX_LINE_BYTES = 16384  # the agent's FileFollower default: the same line gives the same text
MAX_EVENT_LINES = MAX_BLOCK_LINES  # the agent's bounds: the same text gives the same events
MAX_EVENT_CHARS = MAX_BLOCK_CHARS
PROGRESS_EVERY_BYTES = 50_000_000
SKIP_RUN_LINES = 256  # lines tested at once for "nothing here" (see _classify_lines)

Progress = Callable[[str, int, int], None]  # (path, bytes read so far, file size)
Classify = Callable[[str], list[Finding]]


@dataclass(frozen=True)
class Event:
    """Lines classified together, each with its line number in the file."""

    line_numbers: tuple[int, ...]
    lines: tuple[str, ...]

    @property
    def line(self) -> int:
        return self.line_numbers[0]

    @property
    def end_line(self) -> int:
        return self.line_numbers[-1]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass(frozen=True)
class ScanFinding:
    """One finding, placed in its file."""

    line: int  # the line the finding's excerpt starts on (the event's first line if not found)
    end_line: int  # the last line of the event it came from
    kind: str
    severity: str
    title: str
    facts: Mapping[str, FactValue] = field(default_factory=dict)
    excerpt: str = ""
    ts_ns: int | None = None  # time printed in the text, when the classifier read one


@dataclass(frozen=True)
class ScanResult:
    path: str  # as given
    findings: tuple[ScanFinding, ...] = ()
    lines: int = 0
    bytes_read: int = 0  # bytes read from disk (compressed bytes for a gzip file)
    compressed: bool = False
    mtime_ns: int | None = None
    error: str | None = None  # why the file (or its rest) could not be read; findings before it are kept


# ------------------------------------------------------------------------------ grouping


class _Line(NamedTuple):
    """One line of the file, as the grouper reads it (a file is one source)."""

    number: int
    message: str
    source: str = ""


def _event(lines: Sequence[_Line], _level: str) -> Event:
    if len(lines) == 1:  # most lines: no generator for them
        number, message, _ = lines[0]
        return Event((number,), (message,))
    return Event(tuple(line.number for line in lines), tuple(line.message for line in lines))


def _grouper() -> LineGrouper[_Line, Event]:
    return LineGrouper(_event, max_lines=MAX_EVENT_LINES, max_chars=MAX_EVENT_CHARS)


def iter_events(lines: Iterable[str]) -> Iterator[Event]:
    """Events of a file's lines (without their newlines), in the order they end.

    A device block joined to a later summary ends with it, so events are not always in order of
    their first line; ``scan_file`` sorts the findings.
    """
    g = _grouper()
    for number, text in enumerate(lines, start=1):
        yield from g.push(_Line(number, text))
    yield from g.flush_all()


# ------------------------------------------------------------------------------- reading


class _Reader:
    """A file's lines as text, through gzip when the file is gzip, counting what was read."""

    def __init__(self, raw: BinaryIO, *, size: int, path: str, progress: Progress | None) -> None:
        self._raw = raw
        self.compressed = raw.peek(2)[:2] == b"\x1f\x8b" if hasattr(raw, "peek") else False
        self._stream: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb") if self.compressed else raw  # type: ignore[assignment]
        self._size, self._path, self._progress = size, path, progress
        self.lines = 0
        self._next_report = PROGRESS_EVERY_BYTES
        self.reported = False
        self.bytes_read = 0

    def position(self) -> int:
        try:
            return self._raw.tell()
        except (OSError, ValueError):
            return 0

    def __iter__(self) -> Iterator[str]:
        readline = self._stream.readline
        while True:
            raw = readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                # A runaway line: keep its head, drop the rest so the next line keeps its number.
                while True:
                    rest = readline(1 << 16)
                    if not rest or rest.endswith(b"\n"):
                        break
                raw = raw[:MAX_LINE_BYTES]
            self.lines += 1
            if self._progress is not None and not self.lines & 0x3FF:
                self._maybe_report()
            yield raw.decode("utf-8", errors="replace").rstrip("\r\n")

    def _maybe_report(self) -> None:
        pos = self.position()
        if pos >= self._next_report:
            self._next_report = (pos // PROGRESS_EVERY_BYTES + 1) * PROGRESS_EVERY_BYTES
            self.reported = True
            assert self._progress is not None
            self._progress(self._path, pos, self._size)

    def close(self) -> None:
        self.bytes_read = self.position()  # before the file closes, when tell() still answers
        if self._stream is not self._raw:
            self._stream.close()


def _place(finding: Finding, event: Event) -> ScanFinding:
    """The line a finding's excerpt starts on: a traceback's incident is at its exception line."""
    line = event.line
    first = next((s.strip() for s in finding.excerpt.splitlines() if s.strip()), "")
    if first and len(event.lines) > 1:
        for n, text in zip(event.line_numbers, event.lines):
            if first in text:
                line = n
                break
    return ScanFinding(
        line=line,
        end_line=event.end_line,
        kind=finding.kind,
        severity=finding.severity,
        title=finding.title,
        facts=dict(finding.facts),
        excerpt=finding.excerpt,
        ts_ns=finding.ts_ns,
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror  # "Permission denied", "No such file or directory", "Is a directory"
    if isinstance(exc, EOFError):
        return "compressed file ended early (truncated gzip)"
    if isinstance(exc, (gzip.BadGzipFile, zlib.error)):
        return f"not a valid gzip file: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _skip_gate(classify: Classify) -> re.Pattern[str] | None:
    """One regex that matches wherever a block could start or a classifier could fire.

    Built from the classifiers' declared ``triggers`` (the registry's own prefilter), so only for
    the registry's ``classify_text``; a classifier without triggers turns the shortcut off.
    """
    if classify is not classify_text:
        return None
    triggers: set[str] = set()
    for c in registry():
        t = tuple(getattr(c, "triggers", ("",)))
        if not t or "" in t:
            return None
        triggers.update(t)
    words = "|".join(map(re.escape, sorted(triggers, key=len, reverse=True)))
    return re.compile(f"{MAY_OPEN_BLOCK.pattern}|{words}")


def _classify_lines(lines: Iterable[str], classify: Classify, out: list[ScanFinding]) -> None:
    """Group and classify, skipping runs of lines that can neither start a block nor be classified.

    Most of a big log is such lines. While no block is open, a run of ``SKIP_RUN_LINES`` lines in
    which the gate matches nowhere would each be a one-line event with no finding, so the whole
    run is tested with one regex search instead of a Python call per line. The result is the same
    as feeding every line.
    """
    g = _grouper()
    gate = _skip_gate(classify)
    number = 0
    it = iter(lines)

    def run(events: list[Event]) -> None:
        for ev in events:
            for f in classify(ev.text):
                out.append(_place(f, ev))

    while True:
        chunk = list(islice(it, SKIP_RUN_LINES))
        if not chunk:
            break
        if gate is not None and g.idle() and not gate.search("\n".join(chunk)):
            number += len(chunk)
            continue
        for text in chunk:
            number += 1
            run(g.push(_Line(number, text)))
    run(g.flush_all())


def scan_file(
    path: str | os.PathLike[str], *, progress: Progress | None = None, classify: Classify = classify_text
) -> ScanResult:
    """Classify one file's events; a read error ends this file's scan and is returned, never raised."""
    name = os.fspath(path)
    findings: list[ScanFinding] = []
    reader: _Reader | None = None
    error: str | None = None
    mtime_ns: int | None = None
    try:
        with open(name, "rb") as raw:
            st = os.fstat(raw.fileno())
            mtime_ns = st.st_mtime_ns
            reader = _Reader(raw, size=st.st_size, path=name, progress=progress)
            try:
                _classify_lines(reader, classify, findings)
            finally:
                reader.close()
            if progress is not None and reader.reported:
                progress(name, reader.bytes_read, st.st_size)  # a final line for a file that reported
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        error = _describe(exc)
    findings.sort(key=lambda f: (f.line, f.end_line))
    return ScanResult(
        path=name,
        findings=tuple(findings),
        lines=reader.lines if reader else 0,
        bytes_read=reader.bytes_read if reader else 0,
        compressed=reader.compressed if reader else False,
        mtime_ns=mtime_ns,
        error=error,
    )


def scan_files(
    paths: Iterable[str | os.PathLike[str]],
    *,
    progress: Progress | None = None,
    classify: Classify = classify_text,
) -> list[ScanResult]:
    """One ``ScanResult`` per path, in the order given; unreadable files carry ``error``."""
    return [scan_file(p, progress=progress, classify=classify) for p in paths]
