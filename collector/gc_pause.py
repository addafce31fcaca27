"""``paused_gc()``: Python's cycle collector held off while a large result is built.

Reading the whole fleet (``latest_readings`` for ``/metrics/fleet``: 45,000 GPU readings, each a
dict, at 10,000 devices; the Fleet page's overview) makes hundreds of thousands of containers
that live until the answer is sent. Each few hundred allocations start a collection, and as the
result grows the collector walks all of it again (full collections among them): about a second
of a scrape's five at 10,000 devices. What is built holds no reference cycles (rows, dicts,
frozen dataclasses), so reference counting frees it all the same; the collector resumes when the
last builder is done, and runs then as it would have.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.Lock()
_builders = 0  # threads inside paused_gc() now
_was_enabled = False  # whether the collector ran before the first of them came in


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cycle collector off inside (for every thread: it is one per process), back on when
    the last thread inside leaves, unless it was off before the first came in."""
    global _builders, _was_enabled
    with _lock:
        if _builders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _builders += 1
    try:
        yield
    finally:
        with _lock:
            _builders -= 1
            if _builders == 0 and _was_enabled:
                gc.enable()


def builds_with_paused_gc(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` runs inside ``paused_gc()``: a reader that builds the whole fleet's answer."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with paused_gc():
            return fn(*args, **kwargs)

    return wrapper


__all__ = ["builds_with_paused_gc", "paused_gc"]
