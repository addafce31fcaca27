"""Multi-line blocks (Python tracebacks, glog/TensorFlow messages) made into one LogEvent each.

Log sources hand over lines; classifiers want *events*. A PyTorch OOM is a traceback whose last
line holds the numbers, and a chained traceback prints the same failure twice: read as one event
the classifier reports one finding (with the traceback's frames), read line by line it cannot.

:class:`EventGrouper` keeps state per source (two files or units interleaving never mix), and
per line prefix within a source: ``torchrun`` prints ``[rank0]: `` / ``[rank1]: `` before every
line of each rank's traceback, and the ranks' lines interleave. A block becomes one event whose
message is its lines joined with ``"\\n"``, with the first line's times and source.

A traceback ends at its exception line, but may go on: its message's own lines (TensorFlow's
root errors, PyTorch's CUDA_LAUNCH_BLOCKING advice), then a chained one ("During handling of the
above exception ..."). So a traceback open at the end of a poll is held until the next poll,
and flushed once ``max_wait_s`` have passed since its first line or when it reaches ``max_lines``
(the rest continues as a second event). A glog header line with no indented line after it in
the same poll is let through at the end of that poll, not held: glog writes a message and its
continuation lines with one write(), so they arrive together, and holding every glog line would
delay them all.

Speed: the agent runs this over every line. A line of a source with nothing open costs one dict
lookup, one substring test and a character test before it is passed on.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fleetscope.agent.records import LogEvent

__all__ = ["EventGrouper"]

_TB_TEXT = "Traceback (most recent call last):"
# Python 3.11 prints an exception group as "  + Exception Group Traceback (most recent call last):".
_TB_MARK = re.compile(r"(?P<eg>[ \t]*\+ Exception Group )?Traceback \(most recent call last\):[ \t]*$")
_CHAIN = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
# The line that ends a traceback: a (dotted) class name, then ":" or nothing ("KeyboardInterrupt").
# A class made inside a function prints its qualified name: "mod.make.<locals>.Error: ...".
_EXC_LINE = re.compile(r"[A-Za-z_][\w.<>]*(?::|$)")
# Unindented lines known to continue an exception's message after its first line.
_MESSAGE_TRAILERS = (
    "CUDA kernel errors might be asynchronously reported",  # PyTorch "CUDA error: ..." advice
    "For debugging consider passing CUDA_LAUNCH_BLOCKING",
    "Compile with `TORCH_USE_CUDA_DSA`",
    "Hint: ",  # TensorFlow's report_tensor_allocations_upon_oom hint
    "BufferAssignment",  # XLA's OOM dump after RESOURCE_EXHAUSTED
    "The stack trace below excludes JAX-internal frames.",
    "The preceding is the original exception that occurred, unmodified.",
    "For simplicity, JAX has removed its internal frames",
    "--------------------",
)
# glog ("E0421 10:03:12.123456  1234 file.cc:123] ") and TensorFlow/absl
# ("2022-04-17 14:04:31.889463: W tensorflow/core/....cc:275] ") headers.
_GLOG = re.compile(
    r"(?:(?P<a>[IWEF])\d{4} \d\d:\d\d:\d+(?:\.\d+)?\s+\d+ "
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?: (?P<b>[IWEF]) )\S+:\d+\] "
)
_GLOG_FIRST = frozenset("IWEF0123456789")
_GLOG_LEVELS = {"I": "info", "W": "warning", "E": "error", "F": "critical"}
_RANK = {"debug": 0, "info": 1, "warning": 2, "error": 3, "critical": 4}

# Group kinds and traceback states.
_TRACEBACK, _GLOG_BLOCK = "traceback", "glog"
_FRAMES, _EXC_GROUP, _ENDED, _CHAINED = "frames", "exception_group", "ended", "chained"


def _indented(text: str) -> bool:
    return text[:1] in (" ", "\t")


def _traceback_next(state: str, rest: str) -> str | None:
    """The state after one more line of a traceback, or None when the line is not part of it."""
    if not rest.strip():
        return state  # a blank line: kept for now, dropped if the group ends on it
    if state == _FRAMES:
        if _indented(rest):
            return _FRAMES
        if rest.startswith(_TB_TEXT):
            return None  # a new traceback: the one open lost its exception line
        return _ENDED if _EXC_LINE.match(rest) else None
    if state in (_ENDED, _EXC_GROUP) and rest.startswith(_CHAIN):
        return _CHAINED
    if state == _EXC_GROUP:
        return _EXC_GROUP if _indented(rest) else None
    if state == _ENDED:
        return _ENDED if _indented(rest) or rest.startswith(_MESSAGE_TRAILERS) else None
    m = _TB_MARK.match(rest)  # _CHAINED: the next traceback must follow
    if m is None:
        return None
    return _EXC_GROUP if m["eg"] else _FRAMES


@dataclass
class _Group:
    """One block being collected (mutable: it grows line by line)."""

    kind: str
    prefix: str  # printed before every line of the block ("" or e.g. "[rank0]: ")
    state: str
    opened_ns: int
    level: str  # the least the block's level will be
    events: list[LogEvent] = field(default_factory=list)
    blank_tail: int = 0  # trailing blank lines, dropped if the block ends here

    def rest(self, message: str) -> str | None:
        """The line without this block's prefix; None when the line does not carry it."""
        if message.startswith(self.prefix):
            return message[len(self.prefix) :]
        if self.prefix and message.rstrip() == self.prefix.rstrip():
            return ""  # "[rank0]:" alone: a blank line of that rank
        return None

    def next_state(self, rest: str) -> str | None:
        if self.kind == _GLOG_BLOCK:
            return self.state if _indented(rest) and rest.strip() else None
        return _traceback_next(self.state, rest)

    def add(self, event: LogEvent, state: str, rest: str) -> None:
        self.events.append(event)
        self.state = state
        self.blank_tail = 0 if rest.strip() else self.blank_tail + 1

    def restart(self, now_ns: int) -> _Group:
        return _Group(self.kind, self.prefix, self.state, now_ns, self.level)

    def to_event(self) -> LogEvent | None:
        kept = self.events[: len(self.events) - self.blank_tail]
        if len(kept) <= 1:
            return kept[0] if kept else None  # a lone line goes on unchanged
        first = kept[0]
        level = self.level
        for e in kept:
            if _RANK.get(e.level, 1) > _RANK.get(level, 1):
                level = e.level
        return LogEvent(
            ts_ns=first.ts_ns,
            source=first.source,
            message="\n".join(e.message for e in kept),
            level=level,
            parsed_ts_ns=first.parsed_ts_ns,
        )


def _start(event: LogEvent, now_ns: int) -> _Group | None:
    """The block ``event`` opens, if it opens one."""
    msg = event.message
    if _TB_TEXT in msg:
        m = _TB_MARK.search(msg)
        if m is not None:
            state = _EXC_GROUP if m["eg"] else _FRAMES
            return _Group(_TRACEBACK, msg[: m.start()], state, now_ns, "error", [event])
    if msg[:1] in _GLOG_FIRST:
        m = _GLOG.match(msg)
        if m is not None:
            level = _GLOG_LEVELS[m["a"] or m["b"]]
            return _Group(_GLOG_BLOCK, "", "block", now_ns, level, [event])
    return None


class EventGrouper:
    """Joins multi-line blocks into single LogEvents; everything else passes through at once.

    Call :meth:`feed` with each poll's events (also when there are none: that is when held
    blocks time out) and :meth:`flush_all` at shutdown. ``clock`` gives monotonic ns.
    """

    def __init__(
        self,
        *,
        max_wait_s: float = 2.0,
        max_lines: int = 200,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if max_lines < 2:
            raise ValueError("max_lines must be at least 2")
        self._max_wait_ns = int(max_wait_s * 1e9)
        self._max_lines = max_lines
        self._clock = clock
        self._open: dict[str, list[_Group]] = {}  # source -> blocks being collected

    def feed(self, events: Iterable[LogEvent]) -> list[LogEvent]:
        """Events in order, blocks joined; blocks still open are held for the next call."""
        now_ns = self._clock()
        out: list[LogEvent] = []
        for event in events:
            self._take(event, now_ns, out)
        self._release(now_ns, out)
        return out

    def flush_all(self) -> list[LogEvent]:
        """Every held block, now (at shutdown)."""
        out: list[LogEvent] = []
        for groups in self._open.values():
            for g in groups:
                self._emit(g, out)
        self._open.clear()
        return out

    def held_lines(self) -> int:
        return sum(len(g.events) for groups in self._open.values() for g in groups)

    # -- one line ---------------------------------------------------------------------------

    def _take(self, event: LogEvent, now_ns: int, out: list[LogEvent]) -> None:
        groups = self._open.get(event.source)
        if groups and self._extend(groups, event, now_ns, out):
            return
        group = _start(event, now_ns)
        if group is None:
            out.append(event)
        elif groups is not None:
            groups.append(group)
        else:
            self._open[event.source] = [group]

    def _extend(self, groups: list[_Group], event: LogEvent, now_ns: int, out: list[LogEvent]) -> bool:
        """True when ``event`` joined an open block; a block the line does not continue is closed."""
        msg = event.message
        owner = self._owner(groups, msg)
        if owner is None:
            return self._adopt(groups, event)
        rest = owner.rest(msg)
        assert rest is not None
        state = owner.next_state(rest)
        if state is None:
            groups.remove(owner)
            self._emit(owner, out)
            return False
        owner.add(event, state, rest)
        if len(owner.events) >= self._max_lines:
            groups[groups.index(owner)] = owner.restart(now_ns)
            self._emit(owner, out)
        return True

    @staticmethod
    def _owner(groups: list[_Group], msg: str) -> _Group | None:
        # The longest prefix the line carries: "[rank0]: " wins over "" (which every line carries).
        best: _Group | None = None
        for g in groups:
            if g.rest(msg) is not None and (best is None or len(g.prefix) > len(best.prefix)):
                best = g
        return best

    @staticmethod
    def _adopt(groups: list[_Group], event: LogEvent) -> bool:
        # "... ERROR step failed: Traceback (most recent call last):" puts the marker after other
        # text, and the frames follow without it: a traceback of one line takes on prefix "".
        for g in groups:
            if g.kind == _TRACEBACK and len(g.events) == 1 and g.prefix:
                state = _traceback_next(g.state, event.message)
                if state is not None and event.message.strip():
                    g.prefix = ""
                    g.add(event, state, event.message)
                    return True
        return False

    # -- leaving ----------------------------------------------------------------------------

    def _release(self, now_ns: int, out: list[LogEvent]) -> None:
        for source in list(self._open):
            keep: list[_Group] = []
            for g in self._open[source]:
                lone_glog = g.kind == _GLOG_BLOCK and len(g.events) == 1
                if lone_glog or now_ns - g.opened_ns >= self._max_wait_ns:
                    self._emit(g, out)
                else:
                    keep.append(g)
            if keep:
                self._open[source] = keep
            else:
                del self._open[source]  # a source seen once (a rotated file's name) leaves no state

    @staticmethod
    def _emit(group: _Group, out: list[LogEvent]) -> None:
        event = group.to_event()
        if event is not None:
            out.append(event)
