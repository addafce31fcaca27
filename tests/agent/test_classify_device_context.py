"""The agent's own device kind reaches the Jetson memory classifier: a CMA failure that names no
Jetson part is a Jetson memory incident on a Jetson, and a generic allocation failure elsewhere."""

from __future__ import annotations

from fleetscope.agent.classify import classify_event, event_classifier
from fleetscope.agent.records import LogEvent
from fleetscope.proto.vocabulary import KIND_JETSON_MEMORY, KIND_MEMORY_ALLOC_FAILURE

# The shape of a kernel CMA failure, with no tegra, NvMap or L4T word in it.
CMA_LINE = "[ 4711.101010] cma: cma_alloc: alloc failed, req-size: 1024 pages, ret: -12"


def _event(text: str) -> LogEvent:
    return LogEvent(ts_ns=1_700_000_000 * 10**9, source="kmsg", level="error", message=text)


def test_a_bare_cma_failure_on_a_jetson_is_a_jetson_memory_incident() -> None:
    kinds = [r.kind for r in event_classifier(device_is_jetson=True)(_event(CMA_LINE))]
    assert kinds == [KIND_JETSON_MEMORY]


def test_the_same_line_elsewhere_is_a_generic_allocation_failure() -> None:
    assert event_classifier(device_is_jetson=False) is classify_event
    kinds = [r.kind for r in classify_event(_event(CMA_LINE))]
    assert kinds == [KIND_MEMORY_ALLOC_FAILURE]


def test_a_jetson_agent_still_finds_everything_else() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 7.44 GiB total capacity)"
    assert [r.kind for r in event_classifier(device_is_jetson=True)(_event(oom))] == [
        r.kind for r in classify_event(_event(oom))
    ]
