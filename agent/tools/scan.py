"""The offline scanner: find incidents in log files written before the agent was installed.

``fleetscope scan`` runs this over old logs (or logs copied off a drone) with the classifiers the
agent runs (``fleetscope.agent.classify``), so a scan and a live agent agree on what an incident
is. Standard library only, like the rest of the agent: importing the findings into a database is
``fleetscope.collector.ingest.scan_import``'s job.

Events
------
A classifier is given one *event*. ``iter_events`` groups a file's lines into events by these
rules, tried in this order on a line that is not already inside an event:

1. Python traceback: from a line holding ``Traceback (most recent call last):`` through the first
   line after the frames that is not indented (the exception line). Whatever precedes
   ``Traceback`` on the header line (a logger prefix) is ignored on the following lines that
   start with it. A pasted tail that begins at a ``File "...", line N`` frame is grouped the same
   way. A chained exception ("During handling of the above exception ..." or "The above
   exception was the direct cause ...", then the next ``Traceback``) stays in the same event,
   as Python prints the chain as one report. A blank line among the frames ends the event.
2. Kernel OOM burst: from ``invoked oom-killer`` through the ``Killed process`` line, plus the
   ``oom_reaper: reaped process`` line when it comes next. A ``Kill process N ... or sacrifice
   child`` line without the header starts a burst that must reach ``Killed process`` within 8
   lines; a lone ``Killed process`` line is a burst of its own (with its ``oom_reaper`` line).
3. trtexec performance summary: from ``=== Performance summary ===`` while the lines, without
   trtexec's ``[date] [I]`` prefix, are not empty and do not open another ``=== ... ===``
   section; without that header, from ``Throughput: N qps`` while the lines are summary
   statistics. The ``=== Device Information ===`` block (same end rule) seen last before the
   summary is put in front of it, so the benchmark names its GPU: such an event's lines are not
   contiguous. A device block that no summary follows is an event of its own.
4. ``kubectl describe``: a ``State:`` or ``Last State:`` line and the lines indented deeper.
5. Any other line is an event of its own. Blank lines are no event.

An event is cut at ``MAX_EVENT_LINES`` lines or ``MAX_EVENT_CHARS`` characters, so an
unterminated block cannot hold a whole file in memory; a line is cut at ``MAX_LINE_BYTES``,
as the agent's file follower cuts it. Lines are numbered from 1 as editors number them.

Files that start with the gzip magic bytes are decompressed while read (``syslog.2.gz``).
A file that cannot be read gets ``ScanResult.error`` and the scan goes on with the next one.
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import BinaryIO

from fleetscope.agent.classify import Finding, classify_text, registry
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
MAX_EVENT_LINES = 4096  # a kernel task table on a big host is long; a summary or traceback is not
MAX_EVENT_CHARS = 1 << 20
SHORT_BURST_LINES = 8  # "Kill process ... or sacrifice child" is followed by "Killed process" at once
BLOCK_LINES = 64  # trtexec sections and kubectl state blocks are a dozen lines
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

_TB_HEADER = "Traceback (most recent call last):"
_TB_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
_FRAME = re.compile(r'\s*File "[^"]*", line \d+')
_SACRIFICE = re.compile(r"Kill process \d+ .*sacrifice child")
_K8S_STATE = re.compile(r"(\s*)(?:Last )?State:\s+\S")
# trtexec's prefixes: a wrapper's "[INFO] ", the "[MM/DD/YYYY-HH:MM:SS] " stamp, the "[I] " level.
_TRT_PREFIX = re.compile(
    r"\s*(?:\[(?:INFO|WARNING|ERROR|VERBOSE)\]\s*)?(?:\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\]\s*)?(?:\[[IWEVF]\]\s*)?"
)
_THROUGHPUT = re.compile(r"Throughput: [\d.]+ qps")
_SUMMARY_STAT = re.compile(
    r"(?:Throughput|Latency|Enqueue Time|H2D Latency|GPU Compute Time|D2H Latency|Total Host Walltime"
    r"|Total GPU Compute Time|Host Latency|End-to-End Host Latency|Host Compute Time):"
)
# One C-level search decides whether a line can start a block at all: most lines cannot.
_MAYBE_START = re.compile(
    r"Traceback \(most|File \"|oom-killer|ill(?:ed)? process|=== Performance summary|=== Device Information"
    r"|Throughput:|State:"
)

_TAKE, _END_TAKE, _END_REJECT, _HOLD = range(4)


def _trt_message(line: str) -> str:
    return line[_TRT_PREFIX.match(line).end() :].strip()  # type: ignore[union-attr]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


class _Block:
    """An event being collected, with the few facts its end rule needs."""

    def __init__(
        self, kind: str, *, phase: str = "", cap: int = MAX_EVENT_LINES, prefix: str = "", indent: int = 0
    ) -> None:
        self.kind, self.phase, self.cap, self.prefix, self.indent = kind, phase, cap, prefix, indent
        self.numbers: list[int] = []
        self.lines: list[str] = []
        self.chars = 0
        self.pending: list[tuple[int, str]] = []  # blank lines kept only if the event goes on

    def add(self, number: int, line: str) -> None:
        if self.pending:
            for n, text in self.pending:
                self._append(n, text)
            self.pending.clear()
        self._append(number, line)

    def _append(self, number: int, line: str) -> None:
        self.numbers.append(number)
        self.lines.append(line)
        self.chars += len(line) + 1

    def full(self) -> bool:
        return len(self.lines) >= min(self.cap, MAX_EVENT_LINES) or self.chars >= MAX_EVENT_CHARS

    def event(self) -> Event:
        return Event(tuple(self.numbers), tuple(self.lines))


class _Grouper:
    """The grouping rules of the module docstring as a line-at-a-time state machine."""

    def __init__(self) -> None:
        self._block: _Block | None = None
        self._device: Event | None = None  # a trtexec device block waiting for its summary

    def feed(self, number: int, line: str) -> list[Event]:
        out: list[Event] = []
        b = self._block
        if b is not None:
            verdict = self._verdict(b, number, line)
            if verdict == _HOLD:
                return out
            if verdict in (_TAKE, _END_TAKE):
                b.add(number, line)
                if verdict == _END_TAKE or b.full():
                    self._close(out)
                return out
            self._close(out)  # _END_REJECT: the line is looked at afresh below
        self._start(number, line, out)
        return out

    def idle(self) -> bool:
        return self._block is None

    def finish(self) -> list[Event]:
        out: list[Event] = []
        if self._block is not None:
            self._close(out)
        if self._device is not None:
            out.append(self._device)
            self._device = None
        return out

    def _start(self, number: int, line: str, out: list[Event]) -> None:
        if not line.strip():
            return
        block = self._block_for(line) if _MAYBE_START.search(line) else None
        if block is None:
            out.append(Event((number,), (line,)))
            return
        block.add(number, line)
        self._block = block

    @staticmethod
    def _block_for(line: str) -> _Block | None:
        at = line.find(_TB_HEADER)
        if at >= 0:
            return _Block("traceback", phase="frames", prefix=line[:at])
        if _FRAME.match(line):
            return _Block("traceback", phase="frames")
        if "invoked oom-killer" in line:
            return _Block("oom", phase="burst")
        if _SACRIFICE.search(line):
            return _Block("oom", phase="burst", cap=SHORT_BURST_LINES)
        if "Killed process" in line:
            return _Block("oom", phase="killed")
        if "=== Performance summary ===" in line:
            return _Block("summary", phase="header", cap=BLOCK_LINES)
        if "=== Device Information ===" in line:
            return _Block("device", cap=BLOCK_LINES)
        if _THROUGHPUT.match(_trt_message(line)):
            return _Block("summary", phase="stats", cap=BLOCK_LINES)
        m = _K8S_STATE.match(line)
        if m:
            return _Block("k8s", cap=BLOCK_LINES, indent=len(m.group(1)))
        return None

    @staticmethod
    def _verdict(b: _Block, number: int, line: str) -> int:
        if b.kind == "traceback":
            return _Grouper._traceback_verdict(b, number, line)
        if b.kind == "oom":
            if b.phase == "killed":
                return _END_TAKE if "oom_reaper: reaped process" in line else _END_REJECT
            if "Killed process" in line:
                b.phase = "killed"
                return _TAKE
            if "invoked oom-killer" in line or len(b.lines) >= b.cap:
                return _END_REJECT
            return _TAKE if line.strip() else _HOLD
        if b.kind in ("summary", "device"):
            msg = _trt_message(line)
            if b.phase == "stats":
                return _TAKE if _SUMMARY_STAT.match(msg) else _END_REJECT
            return _TAKE if msg and not msg.startswith(("===", "&&&&")) else _END_REJECT
        # k8s
        return _TAKE if line.strip() and _indent(line) > b.indent else _END_REJECT

    @staticmethod
    def _traceback_verdict(b: _Block, number: int, line: str) -> int:
        body = line[len(b.prefix) :] if b.prefix and line.startswith(b.prefix) else line
        blank = not body.strip()
        if b.phase == "frames":
            if blank or _TB_HEADER in body:
                return _END_REJECT
            if body[0] in " \t" or _FRAME.match(body):
                return _TAKE
            b.phase = "exception"  # the first unindented line is the exception: the report may still chain
            return _TAKE
        if blank:
            if len(b.pending) >= 2:
                return _END_REJECT
            b.pending.append((number, line))
            return _HOLD
        if b.phase == "exception" and body.startswith(_TB_CHAIN):
            b.phase = "chain"
            return _TAKE
        if b.phase == "chain" and _TB_HEADER in body:
            b.phase = "frames"
            return _TAKE
        return _END_REJECT

    def _close(self, out: list[Event]) -> None:
        b = self._block
        assert b is not None
        self._block = None
        ev = b.event()
        if b.kind == "device":
            if self._device is not None:
                out.append(self._device)  # two device blocks and no summary between: each on its own
            self._device = ev
            return
        if b.kind == "summary" and self._device is not None:
            d, self._device = self._device, None
            ev = Event(d.line_numbers + ev.line_numbers, d.lines + ev.lines)
        out.append(ev)


def iter_events(lines: Iterable[str]) -> Iterator[Event]:
    """Events of a file's lines (without their newlines), in the order they end.

    A device block joined to a later summary ends with it, so events are not always in order of
    their first line; ``scan_file`` sorts the findings.
    """
    g = _Grouper()
    for number, line in enumerate(lines, start=1):
        yield from g.feed(number, line)
    yield from g.finish()


# ------------------------------------------------------------------------------- reading


class _Reader:
    """A file's lines as text, through gzip when the file is gzip, counting what was read."""

    def __init__(self, raw: BinaryIO, *, size: int, path: str, progress: Progress | None) -> None:
        self._raw = raw
        self.compressed = raw.peek(2)[:2] == b"\x1f\x8b" if hasattr(raw, "peek") else False  # type: ignore[attr-defined]
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
    return re.compile(f"{_MAYBE_START.pattern}|{words}")


def _classify_lines(lines: Iterable[str], classify: Classify, out: list[ScanFinding]) -> None:
    """Group and classify, skipping runs of lines that can neither start a block nor be classified.

    Most of a big log is such lines. While no block is open, a run of ``SKIP_RUN_LINES`` lines in
    which the gate matches nowhere would each be a one-line event with no finding, so the whole
    run is tested with one regex search instead of a Python call per line. The result is the same
    as feeding every line.
    """
    g = _Grouper()
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
        for line in chunk:
            number += 1
            run(g.feed(number, line))
    run(g.finish())


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
