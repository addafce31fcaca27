"""ServedLast: a slow answer is served as last made while the next is made; a quick one never is."""

from __future__ import annotations

import threading

import pytest

from fleetscope.dashboard.served_last import ServedLast

NS = 10**9


class Clock:
    """A monotonic clock the test moves; each ``make`` below advances it by its cost."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def maker(clock: Clock, cost_s: float, made: list[int]):  # type: ignore[no-untyped-def]
    def make(now_ns: int) -> str:
        made.append(now_ns)
        clock.t += cost_s
        return f"fleet as of {now_ns // NS}"

    return make


def test_a_quick_answer_is_made_anew_past_its_freshness_and_never_served_stale() -> None:
    clock, made = Clock(), []
    cache = ServedLast[str](fresh_s=5, stale_after_s=1.0, monotonic=clock)
    make = maker(clock, 0.2, made)
    assert cache.get("k", 100 * NS, make).value == "fleet as of 100"
    assert cache.get("k", 104 * NS, make).value == "fleet as of 100", "within 5 s: the kept answer"
    served = cache.get("k", 105 * NS, make)
    assert (served.value, served.stale) == ("fleet as of 105", False)
    assert made == [100 * NS, 105 * NS]


def test_a_slow_answer_is_served_as_last_made_while_one_background_making_brings_the_next() -> None:
    clock, made = Clock(), []
    cache = ServedLast[str](fresh_s=5, stale_after_s=1.0, monotonic=clock)
    cache.get("k", 100 * NS, maker(clock, 2.0, made))
    release = threading.Event()

    def slow(now_ns: int) -> str:
        release.wait(10)
        made.append(now_ns)
        return f"fleet as of {now_ns // NS}"

    for i in range(20):  # twenty viewers' refreshes while the next answer is made
        served = cache.get("k", (110 + i) * NS, slow)
        assert (served.value, served.stale, served.as_of_ns) == ("fleet as of 100", True, 100 * NS)
    release.set()
    cache.wait_for_refresh("k", 10)
    assert made == [100 * NS, 110 * NS], "one making for twenty requests"
    served = cache.get("k", 112 * NS, slow)
    assert (served.value, served.stale) == ("fleet as of 110", False)


def test_an_answer_past_max_age_is_not_served_the_request_waits_for_a_new_one() -> None:
    clock, made = Clock(), []
    cache = ServedLast[str](fresh_s=5, stale_after_s=1.0, max_age_s=60, monotonic=clock)
    make = maker(clock, 2.0, made)
    cache.get("k", 100 * NS, make)
    clock.t += 61
    served = cache.get("k", 200 * NS, make)
    assert (served.value, served.stale) == ("fleet as of 200", False)
    assert made == [100 * NS, 200 * NS]


def test_a_failing_refresh_keeps_the_last_answer_until_max_age_then_the_error_reaches_the_page() -> None:
    clock, made = Clock(), []
    cache = ServedLast[str](fresh_s=5, stale_after_s=1.0, max_age_s=60, monotonic=clock)
    cache.get("k", 100 * NS, maker(clock, 2.0, made))

    def away(now_ns: int) -> str:
        raise ConnectionError("the database went away")

    assert cache.get("k", 110 * NS, away).value == "fleet as of 100"
    cache.wait_for_refresh("k", 10)
    assert cache.get("k", 120 * NS, away).value == "fleet as of 100", "still served after a failed refresh"
    cache.wait_for_refresh("k", 10)
    clock.t += 61
    with pytest.raises(ConnectionError):
        cache.get("k", 130 * NS, away)


def test_an_older_answer_finishing_last_does_not_replace_a_newer_one() -> None:
    clock = Clock()
    cache = ServedLast[str](fresh_s=5, stale_after_s=100.0, monotonic=clock)
    cache.get("k", 200 * NS, lambda now: "new")
    cache._make("k", 150 * NS, lambda now: "old")  # a slow request for an earlier "now" ends later
    assert cache.get("k", 201 * NS, lambda now: "never").value == "new"


def test_answers_are_kept_per_key_the_least_used_dropped_past_max_entries() -> None:
    clock, made = Clock(), []
    cache = ServedLast[str](fresh_s=5, max_entries=2, monotonic=clock)
    make = maker(clock, 0.0, made)
    cache.get("a", 100 * NS, make)
    cache.get("b", 100 * NS, make)
    cache.get("a", 101 * NS, make)  # "a" used last: "b" goes first
    cache.get("c", 100 * NS, make)
    assert made == [100 * NS] * 3
    cache.get("a", 102 * NS, make)
    assert len(made) == 3, "'a' kept"
    cache.get("b", 102 * NS, make)
    assert len(made) == 4, "'b' was dropped and is made again"
