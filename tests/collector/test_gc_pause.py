"""``paused_gc``: the cycle collector is off while the fleet's answer is built (a second of a
10,000-device scrape went to collections walking the growing result), and back as it was after,
whatever happens inside and however many threads build at once."""

from __future__ import annotations

import gc
import threading

import pytest

from fleetscope.collector.gc_pause import builds_with_paused_gc, paused_gc


@pytest.fixture(autouse=True)
def _collector_on():  # type: ignore[no-untyped-def]
    gc.enable()
    yield
    gc.enable()


def test_off_inside_and_on_after_even_on_an_error() -> None:
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_gc():
        raise RuntimeError("a failed read")
    assert gc.isenabled()


def test_left_off_when_it_was_off_before() -> None:
    gc.disable()
    with paused_gc():
        pass
    assert not gc.isenabled()


def test_back_on_only_when_the_last_of_several_threads_leaves() -> None:
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with paused_gc():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with paused_gc():
            second_in.set()
            first_out.wait(5)
            seen.append(gc.isenabled())  # the first left: still off while this one builds

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [False]
    assert gc.isenabled()


def test_a_reader_wrapped_keeps_its_name_and_answer() -> None:
    @builds_with_paused_gc
    def read(*, n: int) -> bool:
        return n == 3 and not gc.isenabled()

    assert read(n=3) is True and read.__name__ == "read"
    assert gc.isenabled()
