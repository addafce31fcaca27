"""oom_guard with a real CPU allocator failure, and the messages torch prints for CUDA OOMs."""

from __future__ import annotations

import sys
import threading

import pytest
import torch

from fleetscope.agent import sdk
from fleetscope.agent.sdk import _facts

from .conftest import facts

HUGE = 2**62  # no machine has 4 EiB: DefaultCPUAllocator fails at once, without touching memory

NEW_CUDA_MESSAGE = (
    "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.15 GiB of which "
    "4.94 MiB is free. Process 12345 has 79.14 GiB memory in use. Of the allocated memory 78.63 GiB is "
    "allocated by PyTorch, and 12.34 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
    "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
OLD_CUDA_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 15.78 GiB total capacity; 12.21 GiB already "
    "allocated; 1.31 GiB free; 13.23 GiB reserved in total by PyTorch) If reserved memory is >> allocated "
    "memory try setting max_split_size_mb to avoid fragmentation."
)


@pytest.mark.server
def test_a_real_cpu_allocation_failure_is_reraised_unchanged_and_reported(agent) -> None:
    _, sink = agent
    with pytest.raises(RuntimeError) as caught:
        with sdk.oom_guard("alloc"):
            torch.empty(HUGE, dtype=torch.uint8)
    err = caught.value
    assert type(err) is RuntimeError and "DefaultCPUAllocator" in str(err)
    assert (
        caught.traceback[-1].name == "test_a_real_cpu_allocation_failure_is_reraised_unchanged_and_reported"
    )
    # flush happened inside the guard: the incident is there without waiting for an interval
    assert sink.wait_for(lambda s: bool(s.incidents("host_oom")), timeout=5)
    incident = sink.incidents("host_oom")[0]
    f = facts(incident)
    assert f["requested_bytes"] == HUGE
    assert f["allocator"] == "DefaultCPUAllocator" and f["guard"] == "alloc" and f["device"] == "cpu"
    assert f["exception_type"] == "RuntimeError"
    assert isinstance(f.get("host.rss_bytes"), int)
    assert incident.severity == _facts.LEVELS["error"]
    assert "4.00 EiB" not in incident.title and "tried to allocate" in incident.title
    assert "DefaultCPUAllocator" in incident.excerpt


@pytest.mark.server
def test_decorator_records_argument_shapes_dtypes_and_batch_size(agent) -> None:
    _, sink = agent

    @sdk.oom_guard()
    def forward(images: torch.Tensor, masks: list[torch.Tensor], scale: float = 1.0) -> torch.Tensor:
        return torch.empty(HUGE, dtype=torch.uint8)

    images = torch.zeros(12, 3, 8, 8)
    with pytest.raises(RuntimeError):
        forward(images, [torch.zeros(12, 8, 8, dtype=torch.bool)], scale=2.0)
    assert sink.wait_for(lambda s: bool(s.incidents("host_oom")), timeout=5)
    f = facts(sink.incidents("host_oom")[0])
    assert f["arg.images.shape"] == "[12, 3, 8, 8]" and f["arg.images.dtype"] == "float32"
    assert f["arg.masks[0].shape"] == "[12, 8, 8]" and f["arg.masks[0].dtype"] == "bool"
    assert f["arg.images.device"] == "cpu"
    assert f["batch_size"] == 12
    assert "forward" in str(f["guard"])


@pytest.mark.server
def test_inside_train_steps_the_step_and_batch_size_are_added(agent) -> None:
    _, sink = agent
    steps = sdk.train_steps([torch.zeros(5, 2)], name="oomloop")
    for _ in steps:
        with pytest.raises(RuntimeError), sdk.oom_guard():
            torch.empty(HUGE, dtype=torch.uint8)
    assert sink.wait_for(lambda s: bool(s.incidents("host_oom")), timeout=5)
    f = facts(sink.incidents("host_oom")[0])
    assert (f["loop"], f["step"], f["batch_size"]) == ("oomloop", 1, 5)


@pytest.mark.server
def test_memory_error_is_a_host_oom_and_other_errors_pass_untouched(agent) -> None:
    _, sink = agent
    with pytest.raises(MemoryError):
        with sdk.oom_guard("mem"):
            raise MemoryError("Unable to allocate 2.00 EiB for an array with shape (288230376151711744,)")
    with pytest.raises(ValueError):
        with sdk.oom_guard("other"):
            raise ValueError("not memory")
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: bool(s.incidents("host_oom")))
    assert len(sink.incidents()) == 1
    assert facts(sink.incidents("host_oom")[0])["requested_bytes"] == 2 * 2**60


@pytest.mark.server
def test_nested_guards_report_one_exception_once(agent) -> None:
    _, sink = agent

    @sdk.oom_guard("inner")
    def inner() -> None:
        torch.empty(HUGE, dtype=torch.uint8)

    with pytest.raises(RuntimeError):
        with sdk.oom_guard("outer"):
            inner()
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: bool(s.incidents("host_oom")))
    assert len(sink.incidents("host_oom")) == 1 and facts(sink.incidents("host_oom")[0])["guard"] == "inner"


def test_cuda_oom_messages_new_and_old_are_parsed() -> None:
    info = sdk.classify_oom(torch.OutOfMemoryError(NEW_CUDA_MESSAGE))
    assert info is not None and info.kind == "cuda_oom"
    assert info.requested_bytes == 20 * 2**20 and info.device == "cuda:0"
    assert info.facts["total_capacity_bytes"] == round(79.15 * 2**30)
    assert info.facts["free_bytes"] == round(4.94 * 2**20)
    assert info.facts["allocated_by_pytorch_bytes"] == round(78.63 * 2**30)
    assert info.facts["reserved_unallocated_bytes"] == round(12.34 * 2**20)
    old = sdk.classify_oom(RuntimeError(OLD_CUDA_MESSAGE))  # torch < 1.13 raised a bare RuntimeError
    assert old is not None and old.kind == "cuda_oom" and old.device == "cuda:1"
    assert old.requested_bytes == 2 * 2**30
    assert old.facts["total_capacity_bytes"] == round(15.78 * 2**30)
    assert old.facts["reserved_by_pytorch_bytes"] == round(13.23 * 2**30)
    assert (
        sdk.classify_oom(
            RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate")
        ).kind
        == "cuda_oom"
    )  # type: ignore[union-attr]
    assert sdk.classify_oom(RuntimeError("shape mismatch")) is None


@pytest.mark.server
def test_a_cuda_oom_reports_allocator_state_and_summary(monkeypatch: pytest.MonkeyPatch, agent) -> None:
    _, sink = agent
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch.cuda,
        "memory_stats",
        lambda device=None: {
            "allocated_bytes.all.current": 70,
            "reserved_bytes.all.current": 100,
            "num_ooms": 1,
        },
    )
    monkeypatch.setattr(
        torch.cuda,
        "memory_summary",
        lambda device=None, abbreviated=False: "|  PyTorch CUDA memory summary  |",
    )
    with pytest.raises(torch.OutOfMemoryError):
        with sdk.oom_guard("gpu"):
            raise torch.OutOfMemoryError(NEW_CUDA_MESSAGE)
    assert sink.wait_for(lambda s: bool(s.incidents("cuda_oom")), timeout=5)
    incident = sink.incidents("cuda_oom")[0]
    f = facts(incident)
    assert (
        f["cuda.reserved_bytes"] == 100 and f["cuda.num_ooms"] == 1 and f["cuda.fragmentation_ratio"] == 0.3
    )
    assert "memory_snapshot_path" not in f  # history recording is off
    assert "PyTorch CUDA memory summary" in incident.excerpt
    assert incident.title == "CUDA OOM on cuda:0: tried to allocate 20.00 MiB in gpu"


@pytest.mark.server
def test_excepthook_reports_an_uncaught_oom_then_calls_the_previous_hook(agent, monkeypatch) -> None:
    _, sink = agent
    seen: list[BaseException] = []
    monkeypatch.setattr(sys, "excepthook", lambda t, e, tb: seen.append(e))
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    uninstall = sdk.install_oom_hook()
    assert sdk.install_oom_hook() is uninstall
    try:
        try:
            torch.empty(HUGE, dtype=torch.uint8)
        except RuntimeError as e:
            sys.excepthook(type(e), e, e.__traceback__)
        t = threading.Thread(target=lambda: torch.empty(HUGE, dtype=torch.uint8))
        t.start()
        t.join()
    finally:
        uninstall()
    assert len(seen) == 2 and all("DefaultCPUAllocator" in str(e) for e in seen)
    assert sink.wait_for(lambda s: len(s.incidents("host_oom")) == 2, timeout=5)
    assert not getattr(sys.excepthook, "__qualname__", "").startswith("install_oom_hook")


@pytest.mark.server
def test_report_oom_for_programs_that_catch_it_themselves(agent) -> None:
    _, sink = agent
    try:
        torch.empty(HUGE, dtype=torch.uint8)
    except RuntimeError as e:
        assert sdk.report_oom(e, name="retry", batch_size=64)
        assert not sdk.report_oom(e)  # once per exception
    assert not sdk.report_oom(ValueError("x"))
    assert sink.wait_for(lambda s: bool(s.incidents("host_oom")), timeout=5)
    assert facts(sink.incidents("host_oom")[0])["batch_size"] == 64
