"""train_steps on real torch training loops: data wait vs compute, NaN losses, GradScaler, memory."""

from __future__ import annotations

import math
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from fleetscope.agent import sdk
from fleetscope.agent.sdk import _steps
from fleetscope.agent.sdk._shapes import batch_size_of

from .conftest import facts


class SlowDataset(Dataset):
    """Each sample takes 3 ms to "load": a loader slower than the tiny model it feeds."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.003)
        return torch.randn(16), torch.tensor(i % 4)


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


@pytest.fixture
def one_torch_thread():
    # On a busy 2-CPU machine torch's OpenMP pool, waiting at barriers for a descheduled thread,
    # can make a tiny model's step 100x slower; one thread keeps compute what the model costs.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.server
def test_a_slow_loader_shows_more_data_wait_than_compute(agent, one_torch_thread) -> None:
    _, sink = agent
    model, opt = _model()
    x, y = torch.randn(8, 16), torch.zeros(8, dtype=torch.long)
    # Warm up autograd and the optimizer: their first use does one-off imports and allocations
    # that would otherwise count as the first step's compute.
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    loader = DataLoader(SlowDataset(8 * 16), batch_size=8, num_workers=0)
    steps = sdk.train_steps(loader, name="slowload", run="t1")
    for x, y in steps:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        steps.loss(loss.item())
    totals = steps.totals()
    assert totals.steps == 16 and totals.samples == 128
    assert totals.data_wait_ns > totals.compute_ns
    assert totals.data_wait_fraction is not None and totals.data_wait_fraction > 0.5
    assert totals.data_wait_ns >= 16 * 8 * 0.003 * 1e9 * 0.9  # at least the sleeps
    assert totals.last_loss is not None and totals.nonfinite_losses == 0
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: s.merged("slowload.compute", run="t1").count == 16)
    wait = sink.merged("slowload.data_wait", run="t1")
    compute = sink.merged("slowload.compute", run="t1")
    step = sink.merged("slowload.step", run="t1")
    assert wait.count == 16 and step.count == 16
    assert wait.sum_ns > compute.sum_ns
    assert (wait.quantile(0.5) or 0) > (compute.quantile(0.5) or 0)
    ratio = sink.metrics("slowload.data_wait_ratio")
    assert ratio and ratio[-1].value > 0.5 and dict(ratio[-1].labels) == {"run": "t1"}
    assert sink.metrics("slowload.samples_per_s") and sink.metrics("slowload.steps_per_s")
    assert len(sink.metrics("slowload.loss")) == 16


@pytest.mark.server
def test_nan_and_inf_losses_raise_one_incident_per_run_of_them(agent) -> None:
    _, sink = agent
    steps = sdk.train_steps([torch.zeros(4, 2)] * 8, name="nanloop")
    losses = [1.0, float("nan"), float("nan"), 0.9, float("inf"), 0.8, 0.7, 0.6]
    for _batch, value in zip(steps, losses):
        returned = steps.loss(torch.tensor(value))  # a tensor works too (float() reads it)
        assert returned is not None
        assert math.isnan(returned) if math.isnan(value) else returned == pytest.approx(value)
    assert steps.totals().nonfinite_losses == 3
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: len(s.incidents("nan_loss")) == 2)
    first, second = sink.incidents("nan_loss")
    f = facts(first)
    assert f["step"] == 2 and f["value"] == "nan" and f["last_finite_loss"] == 1.0 and f["batch_size"] == 4
    assert facts(second)["value"] == "inf"
    assert first.severity == sdk._facts.LEVELS["error"]
    assert all(m.value == m.value for m in sink.metrics("nanloop.loss"))  # NaN never goes out as a number


@pytest.mark.server
def test_a_real_grad_scaler_whose_scale_collapses_is_an_incident(agent) -> None:
    _, sink = agent
    model, opt = _model()
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0, growth_interval=1000)
    steps = sdk.train_steps([torch.randn(4, 16)] * 8, name="amp", scaler=scaler, min_scale=1.0)
    for x in steps:
        opt.zero_grad()
        loss = model(x).sum() * float("inf")  # overflows every step: the scaler halves each time
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    assert steps.totals().last_grad_scale == pytest.approx(8.0 / 2**8)
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: len(s.incidents("grad_scaler_collapse")) == 1)
    f = facts(sink.incidents("grad_scaler_collapse")[0])
    assert f["scale"] == 0.5 and f["previous_scale"] == 1.0 and f["step"] == 4
    assert f["consecutive_decreases"] == 3  # the first check has nothing to compare with


def test_batch_size_from_the_first_tensor_or_as_given() -> None:
    assert batch_size_of(torch.zeros(7, 3)) == 7
    assert batch_size_of((torch.zeros(5, 2), torch.zeros(5))) == 5
    assert batch_size_of({"input_ids": torch.zeros(3, 128), "labels": torch.zeros(3)}) == 3
    assert batch_size_of([[torch.zeros(2, 2)]]) == 2
    assert batch_size_of(("no tensor first", torch.zeros(4))) == 4
    assert batch_size_of(torch.tensor(1.0)) is None
    assert batch_size_of("text") is None
    steps = sdk.train_steps([{"x": torch.zeros(6, 1)}] * 3, name="bs")
    assert [steps.batch_size for _ in steps] == [6, 6, 6]
    # The loop remembers where the last batch kept its tensor; batches that differ still count right.
    mixed = [{"x": torch.zeros(6, 1)}, {"x": torch.zeros(2, 1)}, (torch.zeros(9),), {"y": torch.zeros(1)}, "none", [torch.zeros(3)]]
    steps = sdk.train_steps(mixed, name="bs_mixed")
    assert [steps.batch_size for _ in steps] == [6, 2, 9, 1, None, 3]
    fixed = sdk.train_steps([object()] * 2, name="bs_fixed", batch_size=32)
    for _ in fixed:
        pass
    assert fixed.totals().samples == 64 and fixed.totals().steps == 2


def test_break_then_close_ends_the_step_and_epochs_carry_on() -> None:
    with sdk.train_steps(range(100), name="brk") as steps:
        for i in steps:
            if i == 4:
                break
    assert steps.totals().steps == 5
    assert _steps.current_step() is None
    for _epoch in range(2):
        for _ in steps:
            pass
    assert steps.totals().steps == 5 + 200


def test_a_loader_error_propagates_unchanged() -> None:
    err = OSError("disk gone")

    def batches():
        yield torch.zeros(2)
        raise err

    steps = sdk.train_steps(batches(), name="loadfail")
    with pytest.raises(OSError) as caught:
        for _ in steps:
            pass
    assert caught.value is err
    assert steps.totals().steps == 1


@pytest.mark.server
def test_cuda_memory_stats_are_recorded_per_step_when_cuda_is_in_use(
    monkeypatch: pytest.MonkeyPatch, agent
) -> None:
    _, sink = agent
    stats = {
        "allocated_bytes.all.current": 600,
        "reserved_bytes.all.current": 1000,
        "allocated_bytes.all.peak": 900,
        "reserved_bytes.all.peak": 1000,
        "inactive_split_bytes.all.current": 100,
        "num_alloc_retries": 0,
        "num_ooms": 0,
    }
    # No GPU here: the allocator's answers are stated, torch's functions are the real call sites.
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: dict(stats))
    steps = sdk.train_steps([torch.zeros(2, 2)] * 3, name="mem")
    for i, _ in enumerate(steps):
        if i == 1:
            stats["num_alloc_retries"] = 2
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: len(s.metrics("mem.cuda.reserved_bytes")) == 3)
    frag = sink.metrics("mem.cuda.fragmentation_ratio")
    assert frag[0].value == pytest.approx(0.4) and frag[0].labels["device"] == "cuda:0"
    assert [m.value for m in sink.metrics("mem.cuda.num_alloc_retries")] == [0, 2, 2]
    assert sink.metrics("mem.cuda.peak_allocated_bytes")[0].value == 900
    assert any("retried 2 allocation" in e.message for e in sink.logs())


def test_no_cuda_means_no_memory_reads() -> None:
    assert sdk.cuda_memory() is None
    steps = sdk.train_steps([torch.zeros(1)] * 2, name="nocuda")
    for _ in steps:
        pass
    assert not torch.cuda.is_initialized()
