"""Where timed blocks land: cumulative per-thread series, read by the reporting thread.

The hot path takes no lock. Each thread owns its series and is their only writer; the
reporting thread copies them (``dict.copy`` runs in C under the GIL, so the copy is
consistent) and sends the difference from its previous copy. Nothing is ever swapped out
under a writer, so no update can be lost between a read and a write.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable, Mapping

from fleetscope.agent.sdk._histogram import INDEX_FACTOR, Histogram, LatencySummary
from fleetscope.proto.v1 import telemetry_pb2 as pb

# A series key is one string: the bare name when there are no labels (the common case), else the
# name and its labels, sorted, joined by control characters. A str caches its hash, which a tuple
# does not, so the hot path's dict lookup stays cheap with labels too.
SeriesKey = str
_SEP = "\x00"  # between name and each label
_EQ = "\x01"  # between a label's key and value


def _clean(text: object) -> str:
    s = text if type(text) is str else str(text)
    if _SEP in s or _EQ in s:
        s = s.replace(_SEP, "?").replace(_EQ, "?")
    return s


def make_key(name: str, labels: Mapping[str, object]) -> SeriesKey:
    if not labels:
        return _clean(name)
    pairs = sorted((_clean(k), _clean(v)) for k, v in labels.items())
    return _SEP.join([_clean(name), *(k + _EQ + v for k, v in pairs)])


def split_key(key: SeriesKey) -> tuple[str, dict[str, str]]:
    if _SEP not in key:
        return key, {}
    name, *pairs = key.split(_SEP)
    return name, dict(p.split(_EQ, 1) for p in pairs)


class _Series:
    __slots__ = ("buckets", "zero", "sum_ns", "errors")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.zero = 0
        self.sum_ns = 0
        self.errors = 0


class _Shard:
    """One thread's series, and the reporter's last copy of them (touched by the reporter only)."""

    __slots__ = ("series", "thread", "last")

    def __init__(self, thread: threading.Thread) -> None:
        self.series: dict[SeriesKey, _Series] = {}
        self.thread = weakref.ref(thread)
        self.last: dict[SeriesKey, tuple[dict[int, int], int, int, int]] = {}

    def alive(self) -> bool:
        t = self.thread()
        return t is not None and t.is_alive()


_tls = threading.local()
_shards: list[_Shard] = []
_shards_lock = threading.Lock()
# Totals of threads that have ended, kept so local summaries still include their blocks.
_retired: dict[SeriesKey, Histogram] = {}
_started_ns = time.time_ns()
_window_start_ns = _started_ns
# Called once per new thread that records, so the reporter starts lazily and import stays free.
_on_new_shard: Callable[[], None] | None = None


def set_new_shard_hook(hook: Callable[[], None] | None) -> None:
    global _on_new_shard
    _on_new_shard = hook


def _new_shard() -> dict[SeriesKey, _Series]:
    shard = _Shard(threading.current_thread())
    with _shards_lock:
        _shards.append(shard)
    _tls.series = shard.series
    hook = _on_new_shard
    if hook is not None:
        try:
            hook()
        except Exception:  # starting the reporter must never fail a timed block
            pass
    return shard.series


def record(
    key: SeriesKey,
    ns: int,
    error: bool = False,
    _log2: Callable[[float], float] = math.log2,
    _ceil: Callable[[float], int] = math.ceil,
    _k: int = INDEX_FACTOR,
) -> None:
    """Add one duration to the calling thread's series ``key``: the SDK's hot path."""
    try:
        series = _tls.series
    except AttributeError:
        series = _new_shard()
    s = series.get(key)
    if s is None:
        s = series[key] = _Series()
    if ns > 0:
        i = _ceil(_log2(ns) * _k) - 1
        b = s.buckets
        b[i] = b.get(i, 0) + 1
        s.sum_ns += ns
    else:
        s.zero += 1
    if error:
        s.errors += 1


def _copy(s: _Series) -> tuple[dict[int, int], int, int, int]:
    # Buckets first, totals after: a record that lands between the two copies shows up in the
    # totals a report early and in the buckets a report late; the counts themselves stay exact.
    return s.buckets.copy(), s.zero, s.sum_ns, s.errors


def collect(now_ns: int | None = None) -> list[pb.LatencyHistogram]:
    """The histograms of everything recorded since the previous ``collect`` (reporter only)."""
    global _window_start_ns
    end_ns = time.time_ns() if now_ns is None else now_ns
    start_ns = _window_start_ns
    _window_start_ns = end_ns
    with _shards_lock:
        shards = list(_shards)
    merged: dict[SeriesKey, Histogram] = {}
    finished: list[_Shard] = []
    for shard in shards:
        # A thread that has ended writes no more, so this copy of it is its last.
        done = not shard.alive()
        for key, s in shard.series.copy().items():
            cur_b, cur_zero, cur_sum, cur_err = _copy(s)
            last = shard.last.get(key)
            shard.last[key] = (cur_b, cur_zero, cur_sum, cur_err)
            if last is None:
                last_b: dict[int, int] = {}
                last_zero = last_sum = last_err = 0
            else:
                last_b, last_zero, last_sum, last_err = last
            delta: dict[int, int] = {}
            for i, c in cur_b.items():
                d = c - last_b.get(i, 0)
                if d:
                    delta[i] = d
            zero = cur_zero - last_zero
            if not delta and not zero:
                continue
            h = merged.get(key)
            if h is None:
                h = merged[key] = Histogram()
            for i, d in delta.items():
                h.buckets[i] = h.buckets.get(i, 0) + d
            h.zero_count += zero
            h.sum_ns += cur_sum - last_sum
            h.errors += cur_err - last_err
        if done:
            finished.append(shard)
    if finished:
        with _shards_lock:
            for shard in finished:
                if shard in _shards:
                    _shards.remove(shard)
                    for key, (b, zero, sum_ns, errors) in shard.last.items():
                        _add(_retired, key, b, zero, sum_ns, errors)
    out = []
    for key, h in merged.items():
        name, labels = split_key(key)
        out.append(h.to_proto(name, labels, start_ns, end_ns))
    return out


def _add(
    into: dict[SeriesKey, Histogram],
    key: SeriesKey,
    b: Mapping[int, int],
    zero: int,
    sum_ns: int,
    errors: int,
) -> None:
    h = into.get(key)
    if h is None:
        h = into[key] = Histogram()
    for i, c in b.items():
        h.buckets[i] = h.buckets.get(i, 0) + c
    h.zero_count += zero
    h.sum_ns += sum_ns
    h.errors += errors


def cumulative() -> dict[SeriesKey, Histogram]:
    """Everything recorded in this process so far, merged per series (for local summaries)."""
    merged: dict[SeriesKey, Histogram] = {}
    with _shards_lock:
        shards = list(_shards)
        for key, h in _retired.items():
            merged[key] = Histogram().merge(h)
    for shard in shards:
        for key, s in shard.series.copy().items():
            _add(merged, key, *_copy(s))
    return merged


def summaries(name: str | None = None) -> list[LatencySummary]:
    elapsed_s = (time.time_ns() - _started_ns) / 1e9
    out = []
    for key, h in cumulative().items():
        key_name, labels = split_key(key)
        if name is None or key_name == name:
            out.append(LatencySummary.of(key_name, labels, h, elapsed_s))
    out.sort(key=lambda s: (s.name, sorted(s.labels.items())))
    return out


def reset_after_fork() -> None:
    """In a forked child: forget the parent's series so nothing is counted twice."""
    global _tls, _shards, _shards_lock, _retired, _started_ns, _window_start_ns
    _tls = threading.local()
    _shards = []
    _retired = {}
    _shards_lock = threading.Lock()
    _started_ns = _window_start_ns = time.time_ns()
