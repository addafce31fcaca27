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
burst (also one pasted from its stack), a trtexec performance summary (with the device block
before it), a ``kubectl describe pod`` (from its ``Name:``) or a lone state block are one event
each; any other line is an event of its own; blank lines are none.
A file has no time, so no block is released for waiting: one ends when a line does not continue
it, or at the end of the file. An event is cut at ``MAX_EVENT_LINES`` lines or
``MAX_EVENT_CHARS`` characters (the agent's bounds), so an unterminated block cannot hold a
whole file in memory; a line is cut at ``MAX_LINE_BYTES``, as the agent's file follower cuts it.
Lines are numbered from 1 as editors number them.

Speed: the file is read a piece (``BLOCK_BYTES``) at a time, and the lines no block could start
at and no classifier could fire on are only counted, never split out or grouped: a gate
(:class:`_Gate`: one regex for the words with a character rare in this file, ``str.find`` for
the others, and the frame and glog openers whose next line continues them) points at the next
line worth looking at. A traceback tail or glog block with no gate word in it is passed over
whole (``QUIET_BLOCK``). The findings are the same as feeding every line to the grouper.

Files that start with the gzip magic bytes are decompressed while read (``syslog.2.gz``).
A file that cannot be read gets ``ScanResult.error`` and the scan goes on with the next one.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, NamedTuple

from fleetscope.agent.classify import Finding, classify_text, gate_patterns, registry
from fleetscope.agent.classify._gate import share, trie_pattern
from fleetscope.agent.classify._normalise import looks_pasted, undecorate
from fleetscope.agent.classify.repeats import merge_repeats
from fleetscope.agent.logs.grouping import (
    FRAME_WORD,
    MAX_BLOCK_CHARS,
    MAX_BLOCK_LINES,
    OPEN_SHAPES,
    OPEN_WORDS,
    OPENS_WITH_NEXT_LINE,
    QUIET_BLOCK,
    LineGrouper,
)
from fleetscope.agent.records import FactValue
from fleetscope.proto.vocabulary import KIND_TENSORRT_ERROR, KIND_TRT_BENCHMARK

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
# A word whose rarest character is commoner than this (in percent of log text) is searched with
# str.find rather than in the gate's regex (_Gate): a word entered at a character this common costs
# the regex less than a pass of its own.
FIND_SHARE = 1.2
SAMPLE_CHARS = 1 << 16  # the start of a file whose characters choose the gate's anchors (_Gate)
SAMPLE_MIN = 4096  # a shorter file uses typical shares
BLOCK_BYTES = 1 << 20
QUIET_MAX_CHARS = MAX_LINE_BYTES // 4  # a block passed over is shorter: none of its lines is cut
_QUIET = re.compile(QUIET_BLOCK)  # read at once; the gate is searched through a whole piece (_classify_blocks)

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

    def blocks(self) -> Iterator[str]:
        """The file as text in pieces of whole lines (each piece ends at a newline, but the last).

        Read ``BLOCK_BYTES`` at a time: a line longer than ``MAX_LINE_BYTES`` that spans pieces is
        cut there and its rest dropped, as :meth:`__iter__` does; one inside a piece is cut by the
        caller (:func:`_cut`) when it is looked at. Lines are counted as they are read.
        """
        # read1: a truncated gzip raises only after the pieces before the damage were handed over.
        read = getattr(self._stream, "read1", self._stream.read)
        step = min(BLOCK_BYTES, max(1 << 12, PROGRESS_EVERY_BYTES // 2))  # progress is per piece
        carry = b""
        skipping = False  # dropping the rest of a cut line, up to its newline
        while True:
            data = read(step)
            if not data:
                if carry:
                    self.lines += 1
                    yield carry.decode("utf-8", errors="replace").rstrip("\r")
                return
            if skipping:
                nl = data.find(b"\n")
                if nl < 0:
                    continue
                data, skipping = data[nl:], False  # the newline ends the cut line held in carry
            data = carry + data
            end = data.rfind(b"\n") + 1
            carry = data[end:]
            if len(carry) > MAX_LINE_BYTES:
                carry, skipping = carry[:MAX_LINE_BYTES], True
            if end:
                block = data[:end]
                self.lines += block.count(b"\n")
                if self._progress is not None:
                    self._maybe_report()
                yield block.decode("utf-8", errors="replace")

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


def _undecorated(blocks: Iterable[str]) -> Iterator[str]:
    """Pieces of a pasted file without the quoting, fences and HTML pasting added
    (``agent/classify/_normalise.py``), so that a quoted report groups as the one event it was."""
    it = iter(blocks)
    first = next(it, None)
    if first is None:
        return
    if not looks_pasted(first):
        # A file that does not start as a paste is a log as written (pastes are short): its other
        # megabytes are passed on as they are, so a long log pays for one look.
        yield first
        yield from it
        return
    yield undecorate(first)
    for block in it:
        yield undecorate(block) if looks_pasted(block) else block


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


class _Gate:
    """Where, from a line's start in a piece of text, the next line worth looking at starts.

    Worth looking at: a line where a classifier could fire (the classifiers' ``triggers`` and
    ``gate_patterns``), or where a block could start (the grouper's opening words and shapes); a
    traceback frame or a glog header only when its next line continues the block it opens
    (``OPENS_WITH_NEXT_LINE``), since alone, with no trigger in it, it is an event with no finding.
    Words that hold a rare character, the shapes and the frame and glog openers (after a
    newline) are found by one regex (agent/classify/_gate.py); the other words with ``str.find``,
    whose skipping search is far faster than a regex entering at every common letter; each one's
    next place is remembered until passed. The gate is necessary, not exact: the grouper and the
    classifiers look closer.
    """

    def __init__(self, words: set[str], shapes: list[tuple[str, str]], sample: str = "") -> None:
        # A word another word holds is enough: the longer one adds nothing to a necessary gate.
        words = {w for w in words if not any(o != w and o in w for o in words)}
        if len(sample) >= SAMPLE_MIN:
            shares = _shares(sample, words)
        else:  # too little text to count: the typical shares of log text (agent/classify/_gate.py)
            shares = {c: share(c) for w in words for c in w}
        # A word with a character rare in this file is found by the regex, entered at such a character
        # (the words' rare characters chosen together, agent/classify/_gate.py); the others by str.find.
        rare = {w for w in words if min(shares.get(c, 0.0) for c in w) <= FIND_SHARE}
        table = tuple(sorted(shares.items()))
        self._regex = _compiled(frozenset(rare), tuple(dict.fromkeys(shapes)), True, table)
        self._clear = _compiled(frozenset(words), tuple(dict.fromkeys(shapes)), False)  # for short spans
        self._first = re.compile(OPENS_WITH_NEXT_LINE)  # a piece's first line has no newline before it
        self._words = sorted(words - rare, key=len, reverse=True)  # found whole: a longer needle skips further
        self._next: dict[str, int] = {}  # each word's next place in the piece (-1: none)
        self._regex_at = -2  # the regex's next match in the piece (-1: none, -2: not searched)
        self._block = ""

    def clear(self, block: str, start: int, end: int) -> bool:
        """True when no word or shape of the gate is in ``block[start:end]`` (the openers aside)."""
        return self._clear.search(block, start, end) is None

    def next_line(self, block: str, pos: int) -> int | None:
        """The start of the first line at or after ``pos`` (a line's start) worth looking at."""
        if block is not self._block:
            self._block, self._next, self._regex_at = block, {}, -2
        if pos == 0 and self._first.match(block):
            return 0
        # From the newline before ``pos``: a frame or glog opener's match starts there.
        at = self._regex_at
        if at != -1 and at < pos - 1:
            m = self._regex.search(block, pos - 1 if pos else 0)
            at = self._regex_at = m.start() if m is not None else -1
        best = at
        nxt = self._next
        for w in self._words:
            at = nxt.get(w, -2)
            if at != -1 and at < pos:
                at = nxt[w] = block.find(w, pos)
            if at >= 0 and (best < 0 or at < best):
                best = at
        if best < 0:
            return None
        if block[best] == "\n":
            return best + 1  # an opener's match: its line starts after the newline
        return block.rfind("\n", pos, best) + 1 or pos


def _shares(sample: str, words: Iterable[str]) -> dict[str, float]:
    """Each character of ``words``: its share of ``sample``, in percent."""
    n = len(sample)
    return {c: 100.0 * sample.count(c) / n for c in {c for w in words for c in w}}


@functools.lru_cache(maxsize=16)
def _compiled(words: frozenset[str], shapes: tuple[tuple[str, str], ...], openers: bool = True,
              table: tuple[tuple[str, float], ...] = ()) -> re.Pattern[str]:
    shares = dict(table)
    return re.compile(trie_pattern(words, [*shapes, ("\n", OPENS_WITH_NEXT_LINE)] if openers else shapes,
                                   (lambda c: shares.get(c, share(c))) if shares else None))


def _skip_gate(classify: Classify, sample: str) -> _Gate | None:
    """The gate over what can start a block or fire a classifier (see :class:`_Gate`).

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
    # A frame line is found by OPENS_WITH_NEXT_LINE, where it matters, not by its word.
    return _Gate({*OPEN_WORDS, *triggers} - {FRAME_WORD}, [*OPEN_SHAPES, *gate_patterns(registry())], sample)


def _cut(line: str) -> str:
    """A line as the agent's follower reads it: at most ``MAX_LINE_BYTES``, without its "\\r"."""
    if len(line) * 4 > MAX_LINE_BYTES:
        raw = line.encode("utf-8", errors="replace")
        if len(raw) > MAX_LINE_BYTES:
            line = raw[:MAX_LINE_BYTES].decode("utf-8", errors="replace")
    return line.rstrip("\r")


class _Versions:
    """The TensorRT version a file prints anywhere (an issue's environment section, trtexec's header):
    the first from a version line, else the first release named by its number."""

    __slots__ = ("line", "release")

    def __init__(self) -> None:
        self.line: str | None = None
        self.release: str | None = None

    def note(self, text: str) -> None:
        from fleetscope.agent.classify.tensorrt import printed_version

        line, release = printed_version(text)
        self.line = self.line or line
        self.release = self.release or release

    @property
    def version(self) -> str | None:
        return self.line or self.release


_TRT_KINDS = frozenset({KIND_TENSORRT_ERROR, KIND_TRT_BENCHMARK})
# A pasted report (an issue, a notes file) names its TensorRT in any spelling ("Tensorrt 7.0", a pip list's
# "tensorrt 6.0.1.5") on lines the gate passes over: a file this small whose TensorRT findings name no version
# is read once more for it. Larger files (a service's logs) are not read twice.
LOOSE_VERSION_MAX_BYTES = 1 << 20


def _loose_version(path: str) -> str | None:
    from fleetscope.agent.classify.tensorrt import loose_version

    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return loose_version(f.read(LOOSE_VERSION_MAX_BYTES))
    except OSError:
        return None


def _with_file_version(findings: Sequence[ScanFinding], versions: _Versions) -> list[ScanFinding]:
    """TensorRT findings whose event printed no version take the one the file prints elsewhere."""
    v = versions.version
    if v is None:
        return list(findings)
    return [
        dataclasses.replace(f, facts={**f.facts, "trt_version": v, "trt_version_from": "file"})
        if f.kind in _TRT_KINDS and f.facts.get("trt_version") is None else f
        for f in findings
    ]


def _classify_blocks(blocks: Iterable[str], classify: Classify, out: list[ScanFinding],
                     versions: _Versions | None = None) -> None:
    """Group and classify pieces of whole lines, looking only at lines the gate points to.

    While no block is open, a line the gate does not point to would be an event with no finding
    (a one-line event, or a lone frame or glog header): the gate is searched through the whole
    piece at once (in C) and the lines before its next match are only counted. While a block is
    open every line is given to the grouper, as it may continue the block. The result is the same
    as feeding every line.
    """
    g = _grouper()
    gate: _Gate | None = None
    first = True
    number = 0
    push = g.push
    idle = g.idle
    quiet = _QUIET.match

    def run(events: list[Event]) -> None:
        for ev in events:
            text = ev.text
            for f in classify(text):
                out.append(_place(f, ev))
            if versions is not None and versions.line is None and "TensorRT" in text:
                versions.note(text)

    for block in blocks:
        if first:  # the gate's words are anchored at the characters that are rare in this file
            gate, first = _skip_gate(classify, block[:SAMPLE_CHARS]), False
        pos, size = 0, len(block)
        while pos < size:
            if gate is not None and idle():
                start = gate.next_line(block, pos)
                if start is None:
                    number += block.count("\n", pos)
                    if not block.endswith("\n"):
                        number += 1  # the file's last line, without its newline
                    break
                number += block.count("\n", pos, start)
                pos = start
                # A traceback tail or glog block with no word of the gate in it: an event with no
                # finding, passed over whole (QUIET_BLOCK says where it certainly ends).
                m = quiet(block, pos)
                if m is not None:
                    end = m.end()
                    if end - pos < QUIET_MAX_CHARS and gate.clear(block, pos, end):
                        number += block.count("\n", pos, end)
                        pos = end
                        continue
            end = block.find("\n", pos)
            if end < 0:
                end = size
            number += 1
            events = push(_Line(number, _cut(block[pos:end])))
            if events:
                run(events)
            pos = end + 1
    run(g.flush_all())


def scan_file(
    path: str | os.PathLike[str], *, progress: Progress | None = None, classify: Classify = classify_text
) -> ScanResult:
    """Classify one file's events; a read error ends this file's scan and is returned, never raised."""
    name = os.fspath(path)
    findings: list[ScanFinding] = []
    versions = _Versions()
    reader: _Reader | None = None
    error: str | None = None
    mtime_ns: int | None = None
    try:
        with open(name, "rb") as raw:
            st = os.fstat(raw.fileno())
            mtime_ns = st.st_mtime_ns
            reader = _Reader(raw, size=st.st_size, path=name, progress=progress)
            try:
                _classify_blocks(_undecorated(reader.blocks()), classify, findings, versions)
            finally:
                reader.close()
            if progress is not None and reader.reported:
                progress(name, reader.bytes_read, st.st_size)  # a final line for a file that reported
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        error = _describe(exc)
    findings.sort(key=lambda f: (f.line, f.end_line))
    if versions.version is None and reader is not None and not reader.compressed and error is None \
            and reader.bytes_read <= LOOSE_VERSION_MAX_BYTES \
            and any(f.kind in _TRT_KINDS and f.facts.get("trt_version") is None for f in findings):
        versions.release = _loose_version(name)
    return ScanResult(
        path=name,
        # one fault, one finding (agent/classify/repeats.py); then the file's TensorRT version where an event has none
        findings=tuple(_with_file_version(merge_repeats(findings), versions)),
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
