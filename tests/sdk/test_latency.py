"""latency(): real torch forward passes timed into histograms that reach a real LocalReportServer."""

from __future__ import annotations

import asyncio
import math
import random
import statistics
import threading
import time

import pytest
import torch

from fleetscope.agent import sdk
from fleetscope.agent.sdk import _latency, _registry
from fleetscope.agent.sdk._histogram import SCHEME, fast_bucket_index
from fleetscope.proto import exponential


@pytest.mark.server
def test_torch_forward_passes_reach_the_sink_with_right_count_and_plausible_percentiles(agent) -> None:
    _, sink = agent
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()
    x = torch.randn(32, 64)
    outer: list[int] = []
    n = 300
    with torch.inference_mode():
        for _ in range(n):
            t0 = time.perf_counter_ns()
            with sdk.latency("test.forward", model="mlp"):
                model(x)
            outer.append(time.perf_counter_ns() - t0)
    assert sdk.flush(5.0)
    assert sink.wait_for(lambda s: s.merged("test.forward", model="mlp").count >= n)
    h = sink.merged("test.forward", model="mlp")
    assert h.count == n and h.errors == 0
    msgs = sink.histograms("test.forward", model="mlp")
    assert all(m.start_ns < m.end_ns for m in msgs)
    assert sum(m.count for m in msgs) == n
    # The block is inside the outer timing, so its percentiles sit below the outer ones (within the
    # histogram's 3 % bucket error). How far below is the SDK's overhead, a benchmark's business: on a
    # loaded machine it can be most of a small forward pass, so the floor only catches a wrong unit.
    outer.sort()
    p50, p99 = h.quantile(0.5), h.quantile(0.99)
    assert p50 is not None and p99 is not None
    assert 0.05 * statistics.median(outer) < p50 <= statistics.median(outer) * 1.03
    assert p50 <= p99 <= outer[-1] * 1.03
    assert h.sum_ns <= sum(outer)
    summary = sdk.latency_summary("test.forward", model="mlp")
    assert summary is not None and summary.count == n and summary.calls_per_s


@pytest.mark.server
def test_an_exception_counts_as_an_error_and_propagates_unchanged(agent) -> None:
    _, sink = agent
    boom = ValueError("boom")
    for _ in range(3):
        with pytest.raises(ValueError) as caught:
            with sdk.latency("test.failing"):
                raise boom
        assert caught.value is boom
        assert caught.traceback[-1].name == "test_an_exception_counts_as_an_error_and_propagates_unchanged"
    with sdk.latency("test.failing"):
        pass
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: s.merged("test.failing").count == 4)
    assert sink.merged("test.failing").errors == 3


@pytest.mark.server
def test_decorator_sync_and_async(agent) -> None:
    _, sink = agent

    @sdk.latency("test.decorated", kind="sync")
    def work(a: int, b: int = 2) -> int:
        """doc kept"""
        return a + b

    @sdk.latency("test.decorated", kind="async")
    async def awork(a: int) -> int:
        await asyncio.sleep(0)
        return a

    @sdk.latency("test.decorated", kind="raises")
    def bad() -> None:
        raise KeyError("k")

    assert work(1) == 3 and work.__doc__ == "doc kept" and work.__name__ == "work"
    assert asyncio.run(awork(5)) == 5
    with pytest.raises(KeyError):
        bad()
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: len(s.histograms("test.decorated")) >= 3)
    assert sink.merged("test.decorated", kind="sync").count == 1
    assert sink.merged("test.decorated", kind="async").count == 1
    raises = sink.merged("test.decorated", kind="raises")
    assert raises.count == 1 and raises.errors == 1


def test_labels_make_series_whatever_their_order_and_values_become_strings() -> None:
    for _ in range(2):
        with sdk.latency("test.labels", a=1, b="x"):
            pass
    with sdk.latency("test.labels", b="x", a="1"):
        pass
    with sdk.latency("test.labels", a=2, b="x"):
        pass
    series = {tuple(sorted(s.labels.items())): s.count for s in sdk.latency_summaries("test.labels")}
    assert series == {(("a", "1"), ("b", "x")): 3, (("a", "2"), ("b", "x")): 1}


def test_nested_use_of_one_object_times_both_blocks() -> None:
    t = sdk.latency("test.nested")
    with t:
        time.sleep(0.002)
        with t:
            pass
    s = sdk.latency_summary("test.nested")
    assert s is not None and s.count == 2
    h = _registry.cumulative()["test.nested"]
    # The outer block kept its own start (~2 ms); the inner one is microseconds.
    assert exponential.bucket_value(max(h.buckets), h.scheme) > 1.5e6
    assert exponential.bucket_value(min(h.buckets), h.scheme) < 1e6


@pytest.mark.server
def test_threads_lose_no_update_without_locks(agent) -> None:
    _, sink = agent
    per_thread, threads = 20_000, 8

    def work() -> None:
        for _ in range(per_thread):
            with sdk.latency("test.threads"):
                pass

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: s.merged("test.threads").count >= per_thread * threads)
    assert sink.merged("test.threads").count == per_thread * threads
    # Ended threads are forgotten by the reporter but still count locally.
    sdk.flush(5.0)
    s = sdk.latency_summary("test.threads")
    assert s is not None and s.count == per_thread * threads


def test_hot_path_bucket_index_is_the_wire_contract_one() -> None:
    rng = random.Random(1)
    values = [rng.randint(1, 10**12) for _ in range(20_000)]
    # Exact bucket boundaries and their neighbours, where a different float path would differ.
    for i in range(1, 40 << SCHEME, 3):
        edge = int(2.0 ** (i / (1 << SCHEME)))
        values += [max(1, edge - 1), max(1, edge), edge + 1]
    values += [2**k for k in range(40)]  # exact powers of two: OTel's bucket edges that are integers
    for v in values:
        assert fast_bucket_index(v) == exponential.bucket_index(v, SCHEME)
    # And through the registry's inlined copy of the same code.
    for v in values[:2000]:
        key = f"test.index.{v}"
        _registry.record(key, v)
        with _latency.latency(key):
            pass
    got = _registry.cumulative()
    for v in values[:2000]:
        assert exponential.bucket_index(v, SCHEME) in got[f"test.index.{v}"].buckets


def test_zero_and_negative_durations_go_to_the_zero_count() -> None:
    sdk.record_duration("test.zero", 0)
    sdk.record_duration("test.zero", -5)
    sdk.record_duration("test.zero", 1000)
    h = _registry.cumulative()["test.zero"]
    assert h.zero_count == 2 and h.count == 3 and h.sum_ns == 1000


def test_cuda_modes_fall_back_to_the_wall_clock_without_cuda() -> None:
    assert not torch.cuda.is_initialized()
    for mode in ("sync", "events"):
        with sdk.latency("test.cuda_fallback", cuda=mode):
            time.sleep(0.001)

        @sdk.latency("test.cuda_fallback", cuda=mode)
        def f() -> int:
            return 1

        assert f() == 1
    s = sdk.latency_summary("test.cuda_fallback")
    assert s is not None and s.count == 4
    assert s.p999_ns is not None and s.p999_ns >= 0.9e6


def test_unknown_cuda_mode_is_a_call_site_error() -> None:
    with pytest.raises(ValueError):
        sdk.latency("x", cuda="always")


class _FakeEvent:
    """Stands in for torch.cuda.Event: a GPU whose kernels take exactly 2.5 ms."""

    clock = 0.0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t: float | None = None
        self.done = True

    def record(self) -> None:
        _FakeEvent.clock += 2.5
        self.t = _FakeEvent.clock

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = True

    def elapsed_time(self, end: _FakeEvent) -> float:
        assert self.t is not None and end.t is not None
        return end.t - self.t


@pytest.mark.server
def test_cuda_events_are_read_on_the_reporting_thread(monkeypatch: pytest.MonkeyPatch, agent) -> None:
    _, sink = agent
    synced: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: synced.append(1))
    for _ in range(5):
        with sdk.latency("test.cuda_events", cuda="events"):
            pass
    assert _latency.pending_events() == 5  # nothing waited in the block
    with sdk.latency("test.cuda_sync", cuda="sync"):
        pass
    assert len(synced) == 2  # on entry and on exit
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: s.merged("test.cuda_events").count == 5)
    h = sink.merged("test.cuda_events")
    assert math.isclose(h.quantile(0.5) or 0, 2.5e6, rel_tol=exponential.relative_error(h.scheme))
    assert _latency.pending_events() == 0


def test_series_keys_round_trip_names_and_labels() -> None:
    for name, labels in (("a", {}), ("a.b", {"x": "1"}), ("n", {"b": 2, "a": "z=y", "c": ""})):
        key = _registry.make_key(name, labels)
        assert _registry.split_key(key) == (name, {k: str(v) for k, v in labels.items()})
    # Separator characters cannot forge another series.
    key = _registry.make_key("a\x00b", {"k\x01": "v\x00"})
    assert _registry.split_key(key) == ("a?b", {"k?": "v?"})
    with sdk.latency("weird\x00name"):
        pass
    assert sdk.latency_summary("weird?name") is not None
