"""``train_steps(loader)``: a training loop's steps split into data wait and compute.

Data wait is the time spent inside the loader's ``__next__``; compute is the time from getting
a batch until the loop asks for the next one. Each step lands in three latency histograms
(``{name}.data_wait``, ``{name}.compute``, ``{name}.step``), so percentiles survive; rates and
means go out as MetricPoints once per flush interval, so a loop doing thousands of steps per
second costs one point per metric per second, not one per step. Memory is a level, not a rate,
and is read per step (``memory_every``) when torch has initialised CUDA.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fleetscope.agent.sdk import _runtime
from fleetscope.agent.sdk._kinds import KIND_GRAD_SCALER_COLLAPSE, KIND_NAN_LOSS
from fleetscope.agent.sdk._memory import cuda_memory, cuda_torch
from fleetscope.agent.sdk._registry import make_key, record
from fleetscope.agent.sdk._shapes import batch_size_path, size_at

T = TypeVar("T")
_now = time.perf_counter_ns
_CUDA_RECHECK_STEPS = 64


@dataclass(frozen=True)
class StepContext:
    """Where a training loop is, for incidents raised inside a step (an OOM, a NaN)."""

    name: str
    step: int
    batch_size: int | None


@dataclass(frozen=True)
class StepTotals:
    """A TrainSteps' totals since it was made."""

    steps: int
    samples: int  # 0 when no batch size could be told
    data_wait_ns: int
    compute_ns: int
    nonfinite_losses: int
    last_loss: float | None
    last_grad_scale: float | None

    @property
    def data_wait_fraction(self) -> float | None:
        total = self.data_wait_ns + self.compute_ns
        return self.data_wait_ns / total if total > 0 else None


_active: TrainSteps[Any] | None = None


def current_step() -> StepContext | None:
    """The step the most recent active ``train_steps`` loop is in, if any."""
    steps = _active
    if steps is None:
        return None
    return StepContext(name=steps.name, step=steps.step, batch_size=steps.batch_size)


class TrainSteps(Generic[T]):
    """Iterate it in place of the loader: ``for batch in steps: ...``; see ``train_steps``."""

    def __init__(
        self,
        iterable: Iterable[T],
        name: str = "train",
        *,
        batch_size: int | None = None,
        scaler: Any = None,
        min_scale: float = 1.0,
        scaler_every: int = 1,
        memory_every: int = 1,
        device: object = None,
        cuda_sync: bool = False,
        **labels: object,
    ) -> None:
        self.name = str(name)
        self._iterable = iterable
        self._it: Iterator[T] | None = None
        self._fixed_batch_size = batch_size
        self._scaler = scaler
        self._min_scale = float(min_scale)
        self._scaler_every = max(1, int(scaler_every))
        self._memory_every = max(0, int(memory_every))
        # Until CUDA is initialised there is no allocator to read: look again every
        # _CUDA_RECHECK_STEPS steps instead of every step. The step just ran evicted the SDK's
        # objects from the CPU caches, so each lookup on the per-step path costs several times
        # its warm price (measured: ~11 us a step for this check on a 1.3 ms CPU step).
        self._memory_next_check = 0
        self._device = device
        self._cuda_sync = cuda_sync
        self._labels = {str(k): str(v) for k, v in labels.items()}
        self._label_items = tuple(sorted(self._labels.items()))
        self._k_wait = make_key(f"{self.name}.data_wait", self._labels)
        self._k_compute = make_key(f"{self.name}.compute", self._labels)
        self._k_step = make_key(f"{self.name}.step", self._labels)
        self.step = 0  # steps begun (1 while the first batch is being processed)
        self.batch_size: int | None = batch_size  # of the current batch, when it could be told
        self._size_path: tuple[object, ...] | None = None
        self._loss_metric = (f"{self.name}.loss", tuple((k, v) for k, v in self._labels.items()))
        self._pending: list[tuple[int, int, int]] = []  # (data wait, compute, samples) of steps not yet folded
        self._got: int | None = None  # when the current batch arrived
        self._wait = 0  # the current step's data wait
        self._steps = 0
        self._samples = 0
        self._wait_total = 0
        self._compute_total = 0
        # The current reporting window, for per-interval rates.
        self._win_start = _now()
        self._win_end = self._win_start + int(_runtime.get_config().flush_interval_s * 1e9)
        self._win_steps = 0
        self._win_samples = 0
        self._win_wait = 0
        self._win_compute = 0
        self._nonfinite = 0
        self._in_nonfinite_run = False
        self._last_loss: float | None = None
        self._last_scale: float | None = None
        self._scale_decreases = 0  # consecutive checks at which the scale fell
        self._scaler_collapsed = False
        self._last_retries: int | None = None

    # ---------------------------------------------------------------- iteration

    def __iter__(self) -> TrainSteps[T]:
        # Iterating again starts a new epoch over the same loader; totals carry on.
        self._it = iter(self._iterable)
        return self

    def __next__(self) -> T:
        global _active
        if self._got is not None:
            self._end_step(_now())
        it = self._it
        if it is None:
            it = self._it = iter(self._iterable)
        t0 = _now()
        try:
            batch = next(it)
        except BaseException:  # StopIteration (the epoch ended) or the loader failing
            self._finish()
            raise
        t1 = _now()
        self._wait = t1 - t0
        self._got = t1
        self.step += 1
        if self._fixed_batch_size is None:
            self.batch_size = self._batch_size(batch)
        _active = self
        return batch

    def _batch_size(self, batch: object) -> int | None:
        # Batches of one loader look alike: go straight to where the last one had its tensor.
        path = self._size_path
        if path is not None:
            try:
                return size_at(batch, path)
            except Exception:
                pass
        try:
            found = batch_size_path(batch)
        except Exception:
            found = None
        self._size_path = None if found is None else found[1]
        return None if found is None else found[0]

    def __enter__(self) -> TrainSteps[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the current step and send the window's figures (a loop left with ``break``)."""
        if self._got is not None:
            self._end_step(_now())
        self._finish()

    def _finish(self) -> None:
        global _active
        self._got = None
        self._it = None
        try:
            self._emit_window(_now())
        except Exception:
            pass
        if _active is self:
            _active = None

    def _end_step(self, t_end: int) -> None:
        got = self._got
        self._got = None
        if got is None:
            return
        try:
            if self._cuda_sync:
                torch = cuda_torch()
                if torch is not None:
                    torch.cuda.synchronize()
                    t_end = _now()
            self._pending.append((self._wait, t_end - got, self.batch_size or 0))
            if self._scaler is not None and self.step % self._scaler_every == 0:
                self._check_scaler()
            if self._memory_every and self.step % self._memory_every == 0 and self.step >= self._memory_next_check:
                self._read_memory()
            if t_end >= self._win_end:
                self._emit_window(t_end)
        except Exception:  # bookkeeping must never break a training loop
            pass

    # ---------------------------------------------------------------- per-window figures

    def _metric(self, suffix: str, value: float) -> None:
        _runtime.metric_with_labels(f"{self.name}.{suffix}", value, self._labels)

    def _fold_pending(self) -> None:
        """Record the steps finished since the last fold into the histograms and the totals.

        A step only appends its three figures to a list; this runs once per reporting window.
        Right after a training step the SDK's objects are out of the CPU caches, so every lookup
        on the per-step path costs several times its warm price: with three histograms and
        eight counters recorded in each step, the SDK's share of ``next()`` measured 18 us on a
        1.3 ms CPU step; with this fold, 7 us.
        """
        pending, self._pending = self._pending, []
        if not pending:
            return
        k_wait, k_compute, k_step = self._k_wait, self._k_compute, self._k_step
        wait_sum = compute_sum = samples = 0
        for wait, compute, n in pending:
            record(k_wait, wait)
            record(k_compute, compute)
            record(k_step, wait + compute)
            wait_sum += wait
            compute_sum += compute
            samples += n
        steps = len(pending)
        self._steps += steps
        self._samples += samples
        self._wait_total += wait_sum
        self._compute_total += compute_sum
        self._win_steps += steps
        self._win_samples += samples
        self._win_wait += wait_sum
        self._win_compute += compute_sum

    def _emit_window(self, now: int) -> None:
        self._fold_pending()
        elapsed_s = (now - self._win_start) / 1e9
        steps = self._win_steps
        if steps and elapsed_s > 0:
            self._metric("steps_per_s", steps / elapsed_s)
            if self._win_samples:
                self._metric("samples_per_s", self._win_samples / elapsed_s)
            self._metric("data_wait_ms", self._win_wait / steps / 1e6)
            self._metric("compute_ms", self._win_compute / steps / 1e6)
            busy = self._win_wait + self._win_compute
            if busy > 0:
                self._metric("data_wait_ratio", self._win_wait / busy)
            if self._last_scale is not None and math.isfinite(self._last_scale):
                self._metric("grad_scale", self._last_scale)
        self._win_start = now
        self._win_end = now + int(_runtime.get_config().flush_interval_s * 1e9)
        self._win_steps = self._win_samples = self._win_wait = self._win_compute = 0

    def _read_memory(self) -> None:
        mem = cuda_memory(self._device)
        if mem is None:
            self._memory_next_check = self.step + _CUDA_RECHECK_STEPS
            return
        labels = dict(self._labels, device=f"cuda:{mem.device}")
        prefix = f"{self.name}.cuda"
        _runtime.metric_with_labels(f"{prefix}.allocated_bytes", mem.allocated_bytes, labels)
        _runtime.metric_with_labels(f"{prefix}.reserved_bytes", mem.reserved_bytes, labels)
        _runtime.metric_with_labels(f"{prefix}.peak_allocated_bytes", mem.peak_allocated_bytes, labels)
        _runtime.metric_with_labels(f"{prefix}.fragmentation_ratio", mem.fragmentation, labels)
        _runtime.metric_with_labels(f"{prefix}.num_alloc_retries", mem.num_alloc_retries, labels)
        last = self._last_retries
        self._last_retries = mem.num_alloc_retries
        if last is not None and mem.num_alloc_retries > last:
            _runtime.log(
                f"{self.name} step {self.step}: CUDA allocator retried {mem.num_alloc_retries - last} "
                f"allocation(s) after freeing its cache (reserved {mem.reserved_bytes} B, "
                f"allocated {mem.allocated_bytes} B): memory pressure",
                "warning",
            )

    # ---------------------------------------------------------------- loss and AMP

    def loss(self, value: object) -> float | None:
        """Record the step's loss; NaN/Inf raises a ``nan_loss`` incident (once per run of them).

        ``float()`` of a CUDA tensor waits for the GPU: pass ``loss.item()`` where the loop has it.
        Returns the value as a float, or None when it could not be read.
        """
        try:
            v = float(value)  # type: ignore[arg-type]
        except Exception:
            return None
        try:
            if v - v == 0.0:  # finite: NaN and ±Inf both give NaN here, cheaper than math.isfinite
                self._in_nonfinite_run = False
                self._last_loss = v
                name, label_items = self._loss_metric
                _runtime.transport.emit((name, time.time_ns(), v, label_items))  # what metric() would queue
                return v
            self._nonfinite += 1
            if not self._in_nonfinite_run:
                self._in_nonfinite_run = True
                facts: dict[str, object] = {
                    "loop": self.name,
                    "step": self.step,
                    "value": repr(v),
                    "nonfinite_losses": self._nonfinite,
                    "last_finite_loss": self._last_loss,
                    "batch_size": self.batch_size,
                    "grad_scale": self._last_scale,
                }
                facts.update(self._labels)
                _runtime.report_incident(
                    KIND_NAN_LOSS,
                    "error",
                    f"{self.name}: loss is {v!r} at step {self.step}",
                    facts,
                    excerpt=f"loss={v!r} step={self.step} last_finite={self._last_loss!r}",
                )
        except Exception:
            pass
        return v

    def _check_scaler(self) -> None:
        scaler = self._scaler
        try:
            is_enabled = getattr(scaler, "is_enabled", None)
            if is_enabled is not None and not is_enabled():
                return
            # get_scale() reads a device tensor: one sync per check, hence scaler_every.
            scale = float(scaler.get_scale())
        except Exception:
            return
        prev = self._last_scale
        if prev is not None and scale < prev:
            self._scale_decreases += 1
        elif prev is not None:
            self._scale_decreases = 0
        self._last_scale = scale
        collapsed = not math.isfinite(scale) or scale < self._min_scale
        if collapsed and not self._scaler_collapsed:
            self._scaler_collapsed = True
            facts: dict[str, object] = {
                "loop": self.name,
                "step": self.step,
                "scale": scale,
                "previous_scale": prev,
                "min_scale": self._min_scale,
                "consecutive_decreases": self._scale_decreases,
                "last_finite_loss": self._last_loss,
            }
            facts.update(self._labels)
            _runtime.report_incident(
                KIND_GRAD_SCALER_COLLAPSE,
                "error",
                f"{self.name}: AMP GradScaler scale collapsed to {scale:g} at step {self.step}",
                facts,
                excerpt=(
                    f"scale={scale:g} previous={prev!r} after {self._scale_decreases} consecutive "
                    "decrease(s): gradients overflow in fp16 at every step, so optimizer steps are skipped"
                ),
            )
        elif not collapsed:
            self._scaler_collapsed = False

    # ---------------------------------------------------------------- inspection

    def totals(self) -> StepTotals:
        self._fold_pending()
        return StepTotals(
            steps=self._steps,
            samples=self._samples,
            data_wait_ns=self._wait_total,
            compute_ns=self._compute_total,
            nonfinite_losses=self._nonfinite,
            last_loss=self._last_loss,
            last_grad_scale=self._last_scale,
        )


def train_steps(
    iterable: Iterable[T],
    name: str = "train",
    *,
    batch_size: int | None = None,
    scaler: Any = None,
    min_scale: float = 1.0,
    scaler_every: int = 1,
    memory_every: int = 1,
    device: object = None,
    cuda_sync: bool = False,
    **labels: object,
) -> TrainSteps[T]:
    """Wrap a DataLoader (or any iterable of batches) to time and watch each training step.

    ``for batch in steps`` yields the loader's batches unchanged. ``steps.loss(v)`` records the
    loss and flags NaN/Inf; ``scaler=`` watches a ``torch.amp.GradScaler`` for a scale that
    collapses below ``min_scale``. ``batch_size`` overrides the first-dimension guess.
    ``cuda_sync=True`` synchronizes at each step's end so compute includes queued GPU work (it
    costs the host its queue-ahead; off by default). ``memory_every=0`` stops memory reads.
    """
    return TrainSteps(
        iterable,
        name,
        batch_size=batch_size,
        scaler=scaler,
        min_scale=min_scale,
        scaler_every=scaler_every,
        memory_every=memory_every,
        device=device,
        cuda_sync=cuda_sync,
        **labels,
    )
