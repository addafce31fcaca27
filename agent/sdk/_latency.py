"""``latency(name, **labels)``: time a block or a function into the per-thread registry.

The wall-clock path is a clock read on entry, one on exit and one ``record`` call: about a
microsecond in CPython. CUDA modes cost more and are chosen by the caller, because only the
caller knows whether the block's GPU work is what matters:

* ``cuda="sync"`` synchronizes the device on entry and exit, so the wall time covers the GPU work
  (and stalls the host's queue-ahead: use it around coarse blocks).
* ``cuda="events"`` records a CUDA event pair on the current stream and reads their elapsed time
  later on the reporting thread, so the block itself never waits for the GPU.

Both fall back to the wall clock when torch has not initialised CUDA: the SDK never initialises
a device on its own.
"""

from __future__ import annotations

import collections
import functools
import inspect
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

from fleetscope.agent.sdk import _registry
from fleetscope.agent.sdk._histogram import INDEX_FACTOR
from fleetscope.agent.sdk._memory import cuda_torch as _cuda_ready
from fleetscope.agent.sdk._registry import SeriesKey, make_key, record

F = TypeVar("F", bound=Callable[..., Any])

_now = time.perf_counter_ns
_CUDA_MODES = (None, "events", "sync")

# Event pairs waiting for the GPU. deque.append/popleft are atomic, so user threads add and the
# reporting thread takes without a lock. Bounded: a GPU that never completes must not grow memory.
_MAX_PENDING_EVENTS = 100_000
_pending: collections.deque[tuple[SeriesKey, Any, Any, bool]] = collections.deque()
_pending_dropped = 0

# Label sets as given -> their key, so a labelled block skips the sort and join after the first.
_MAX_CACHED_KEYS = 10_000
_key_cache: dict[tuple[Any, ...], SeriesKey] = {}


def latency(name: str, *, cuda: str | None = None, **labels: object) -> LatencyBlock:
    """Time a block (``with latency("forward"):``) or every call of a function (``@latency(...)``).

    Every block counts once in the histogram of ``(name, labels)``; one that raises also counts
    as an error, and the exception propagates unchanged. Label values are turned into strings.
    ``cuda`` is a mode (see the module doc), so it cannot be used as a label name.
    """
    if labels:
        raw = (name, *labels.items())
        try:
            key = _key_cache.get(raw)
        except TypeError:  # an unhashable label value: no caching, same key
            key = make_key(name, labels)
        if key is None:
            key = make_key(name, labels)
            if len(_key_cache) < _MAX_CACHED_KEYS:
                _key_cache[raw] = key
    else:
        key = name if type(name) is str and "\x00" not in name else make_key(name, {})
    if cuda is None:
        return LatencyBlock(key)
    if cuda not in _CUDA_MODES:
        raise ValueError(f"cuda must be None, 'events' or 'sync', got {cuda!r}")
    return LatencyBlock(key, cuda)


class LatencyBlock:
    """What ``latency()`` returns: a context manager and a decorator for one series.

    One object times one block at a time per thread; create it where it is used
    (``with sdk.latency("x"):``), or use the decorator form, which keeps its start time per call
    and is safe across threads. Re-entering the same object (nesting) is supported.
    """

    __slots__ = ("_key", "_cuda", "_start")

    def __init__(self, key: SeriesKey, cuda: str | None = None) -> None:
        self._key = key
        self._cuda = cuda
        # An int while one wall-clock block runs; a list of starts when the object is re-entered
        # (nested); a tuple for an event-timed block; None when idle.
        self._start: Any = None

    @property
    def key(self) -> SeriesKey:
        return self._key

    def __enter__(self, _now: Callable[[], int] = _now) -> LatencyBlock:
        if self._start is None and self._cuda is None:
            self._start = _now()
            return self
        return self._enter_slow()

    def __exit__(
        self,
        exc_type: object,
        exc: object,
        tb: object,
        _now: Callable[[], int] = _now,
        _log2: Callable[[float], float] = math.log2,
        _ceil: Callable[[float], int] = math.ceil,
        _k: int = INDEX_FACTOR,
    ) -> bool:
        end = _now()
        start = self._start
        if type(start) is not int or self._cuda is not None:
            return self._exit_slow(exc_type is not None)
        self._start = None
        # _registry.record, inlined: the call itself would be a fifth of a block's cost.
        try:
            try:
                series = _registry._tls.series
            except AttributeError:
                series = _registry._new_shard()
            key = self._key
            s = series.get(key)
            if s is None:
                s = series[key] = _registry._Series()
            ns = end - start
            if ns > 0:
                i = _ceil(_log2(ns) * _k) - 1
                b = s.buckets
                b[i] = b.get(i, 0) + 1
                s.sum_ns += ns
            else:
                s.zero += 1
            if exc_type is not None:
                s.errors += 1
        except Exception:  # a failure to record must never replace the user's outcome
            pass
        return False

    # -------------------------------------------------------------- nesting

    def _enter_slow(self) -> LatencyBlock:
        token = _now() if self._cuda is None else self._enter_cuda()
        start = self._start
        if start is None:
            self._start = token
        elif type(start) is list:
            start.append(token)
        else:
            self._start = [start, token]
        return self

    def _pop_start(self) -> Any:
        start = self._start
        if type(start) is list:
            token = start.pop()
            if len(start) == 1:
                self._start = start[0]
            return token
        self._start = None
        return start

    # -------------------------------------------------------------- CUDA modes

    def _enter_cuda(self) -> Any:
        torch = _cuda_ready()
        if torch is None:
            return _now()
        try:
            if self._cuda == "sync":
                torch.cuda.synchronize()
                return _now()
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            return ("events", start)
        except Exception:
            return _now()

    def _exit_slow(self, error: bool) -> bool:
        end = _now()
        start = self._pop_start()
        try:
            if type(start) is int:
                # Wall clock: plain, a "sync" block (wait for the GPU first), or a fallback
                # for a CUDA mode without CUDA.
                if self._cuda == "sync":
                    torch = _cuda_ready()
                    if torch is not None:
                        torch.cuda.synchronize()
                        end = _now()
                record(self._key, end - start, error)
            elif type(start) is tuple:
                torch = _cuda_ready()
                if torch is not None:
                    stop = torch.cuda.Event(enable_timing=True)
                    stop.record()
                    _push_pending(self._key, start[1], stop, error)
        except Exception:
            pass
        return False

    # -------------------------------------------------------------- decorator

    def __call__(self, fn: F) -> F:
        key, cuda = self._key, self._cuda
        if cuda is not None:
            if inspect.iscoroutinefunction(fn):

                @functools.wraps(fn)
                async def cuda_async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    with LatencyBlock(key, cuda):
                        return await fn(*args, **kwargs)

                return cuda_async_wrapper  # type: ignore[return-value]

            @functools.wraps(fn)
            def cuda_wrapper(*args: Any, **kwargs: Any) -> Any:
                with LatencyBlock(key, cuda):
                    return fn(*args, **kwargs)

            return cuda_wrapper  # type: ignore[return-value]

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                start = _now()
                try:
                    result = await fn(*args, **kwargs)
                except BaseException:
                    _safe_record(key, _now() - start, True)
                    raise
                _safe_record(key, _now() - start, False)
                return result

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = _now()
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                _safe_record(key, _now() - start, True)
                raise
            _safe_record(key, _now() - start, False)
            return result

        return wrapper  # type: ignore[return-value]


def _safe_record(key: SeriesKey, ns: int, error: bool) -> None:
    try:
        record(key, ns, error)
    except Exception:
        pass


def record_duration(name: str, duration_ns: int, *, error: bool = False, **labels: object) -> None:
    """Add a duration measured elsewhere (a GPU timer, a remote call) to ``(name, labels)``."""
    _safe_record(make_key(name, labels), int(duration_ns), error)


def _push_pending(key: SeriesKey, start: Any, end: Any, error: bool) -> None:
    global _pending_dropped
    if len(_pending) >= _MAX_PENDING_EVENTS:
        _pending_dropped += 1
        return
    _pending.append((key, start, end, error))


def resolve_cuda_events(wait: bool = False) -> int:
    """Record every finished event pair (reporting thread); returns how many were recorded.

    Pairs are taken in order and the first unfinished one stops the pass: work on one stream
    finishes in order, and one still running holds back only until the next report.
    """
    done = 0
    while _pending:
        try:
            key, start, end, error = _pending[0]
        except IndexError:
            break
        try:
            if not end.query():
                if not wait:
                    break
                end.synchronize()
            ms = start.elapsed_time(end)
        except Exception:
            ms = None
        try:
            _pending.popleft()
        except IndexError:
            break
        if ms is not None:
            _safe_record(key, int(ms * 1e6), error)
            done += 1
    return done


def pending_events() -> int:
    return len(_pending)


def reset_after_fork() -> None:
    global _pending, _pending_dropped
    # CUDA cannot be used in a forked child, so the parent's events mean nothing here.
    _pending = collections.deque()
    _pending_dropped = 0
