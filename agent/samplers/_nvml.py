"""The one choke point for every NVML call (the role nvitop's ``nvmlQuery`` plays).

Everything the agent asks NVML goes through :class:`Nvml`, which

* imports ``pynvml`` lazily (never at module import: this module is loaded on Jetson drones
  that have no discrete-GPU driver) and calls ``nvmlInit`` on first use;
* runs calls on one worker thread with a deadline, because an NVML call on a GPU that is
  falling off the bus can block for minutes and the agent loop must not block with it;
* sorts failures into kinds that are handled apart:

  - **not supported** (``NVML_ERROR_NOT_SUPPORTED``, a function the driver or binding lacks,
    no permission): the reading is ``None``; remembered per (GPU, field) so it is logged once
    and never asked again;
  - **GPU lost** (``NVML_ERROR_GPU_IS_LOST``, ``NVML_ERROR_UNKNOWN``, ``NVML_ERROR_RESET_REQUIRED``):
    :class:`GpuLost` is raised; the sampler turns it into a ``gpu_lost`` incident;
  - **library missing** (``NVML_ERROR_LIBRARY_NOT_FOUND``, ``NVML_ERROR_DRIVER_NOT_LOADED``, an
    NVML/kernel-module version mismatch, no ``pynvml``): :class:`NvmlUnavailable` is raised;
    the agent turns the source off with one log line;
  - anything else (``NVML_ERROR_TIMEOUT``, ``NO_DATA``, ...) is transient: ``None`` this time.

Timeouts: a call that misses its deadline reads as ``None``; the worker stuck in it is
abandoned (it exits when the call returns) and a fresh one takes the remaining calls, so the
rest of the sample is still read. The (GPU, field) is then not asked for ``slow_for_s`` and the
GPU is marked slow; a second timeout on a slow GPU parks the whole GPU (every call answers
``None`` at once) for ``slow_for_s``. At most ``max_stuck_workers`` abandoned threads may be
alive; past that every call answers ``None`` until one returns, which bounds both the threads
and the time one sample can spend waiting.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetscope.agent.samplers._base import SourceUnavailable

log = logging.getLogger(__name__)

# Error codes as nvml.h defines them. They are read from the module when it has them (any
# nvidia-ml-py does); these are the fallbacks.
_CODES: Mapping[str, int] = {
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_TIMEOUT": 10,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_RESET_REQUIRED": 16,
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": 18,
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH": 25,
    "NVML_ERROR_DEPRECATED": 26,
    "NVML_ERROR_UNKNOWN": 999,
}
# A function that cannot answer for this device or binding: fall back to the next alternative,
# or remember the field as unsupported. INVALID_ARGUMENT is here because NVML answers it for
# parent-level queries on MIG handles and for struct versions an old driver does not know.
_UNSUPPORTED = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    "NVML_ERROR_DEPRECATED",
)
# The GPU itself is gone or wedged. UNKNOWN is what NVML returns for a GPU that dropped off
# the bus before it notices; RESET_REQUIRED means no reading will work until a reset.
_LOST = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN", "NVML_ERROR_RESET_REQUIRED")
# NVML as a whole cannot work here. UNINITIALIZED only happens if someone shut NVML down under us.
_UNAVAILABLE = (
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    "NVML_ERROR_UNINITIALIZED",
)

SYSTEM = "system"  # the key for calls that are not about one GPU


class NvmlUnavailable(SourceUnavailable):
    """NVML cannot be used on this device: no ``pynvml``, no library, or no driver."""


class GpuLost(RuntimeError):
    """NVML reports the GPU lost (fallen off the bus, needs a reset)."""

    def __init__(self, gpu: str, field: str, error: str, code: int | None = None) -> None:
        super().__init__(f"{gpu}: {error} (while reading {field})")
        self.gpu = gpu
        self.field = field
        self.error = error
        self.code = code


class NvmlCallError(RuntimeError):
    """A failed :meth:`Nvml.direct` call that is neither GPU lost nor library missing."""

    def __init__(self, name: str, kind: str, error: str, code: int | None) -> None:
        super().__init__(f"{name}: {error}")
        self.name = name
        self.kind = kind  # "unsupported", "absent", "transient" or "error"
        self.code = code


@dataclass(frozen=True)
class Alt:
    """One way to read a field: an NVML function name and its arguments."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """A field to read: alternatives tried in order (the first that the device supports is
    remembered) and an optional ``convert`` run on the caller's thread, whose NVML errors are
    classified like the call's own."""

    field: str
    alts: tuple[Alt, ...]
    convert: Callable[[Any], Any] | None = None


def call(
    field: str, name: str, *args: Any, convert: Callable[[Any], Any] | None = None, **kwargs: Any
) -> Call:
    return Call(field, (Alt(name, args, kwargs),), convert)


def first_of(field: str, *alts: Alt, convert: Callable[[Any], Any] | None = None) -> Call:
    return Call(field, alts, convert)


class _Job:
    """A batch of calls handed to the worker. ``mark`` is (index, start time) of the call in
    progress, written as one tuple so the waiting side reads a consistent pair."""

    __slots__ = ("calls", "starts", "results", "mark", "done", "lock", "cancelled")

    def __init__(self, calls: Sequence[Call], starts: list[int]) -> None:
        self.calls = calls
        self.starts = starts
        self.results: list[tuple[bool, Any] | None] = [None] * len(calls)
        self.mark = (0, time.monotonic())
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.cancelled = False


class _Worker:
    def __init__(self, invoke: Callable[[Call, int], tuple[int, Any]], stop_codes: frozenset[int]) -> None:
        self._invoke = invoke
        self._stop_codes = stop_codes
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.retired = False
        # Daemon: an abandoned worker stuck inside the driver must not keep the agent from exiting.
        self.thread = threading.Thread(target=self._run, name="fleetscope-nvml", daemon=True)
        self.thread.start()

    def submit(self, job: _Job) -> None:
        self._queue.put(job)

    def stop(self) -> None:
        self._queue.put(None)

    def _run(self) -> None:
        invoke = self._invoke
        stop_codes = self._stop_codes
        while True:
            job = self._queue.get()
            if job is None:
                return
            for i, c in enumerate(job.calls):
                job.mark = (i, time.monotonic())
                try:
                    outcome: tuple[bool, Any] = (True, invoke(c, job.starts[i]))
                except Exception as e:  # every failure is classified by the caller
                    outcome = (False, e)
                with job.lock:
                    if job.cancelled:
                        break
                    job.results[i] = outcome
                # After GPU lost the rest of the batch would only fail (or hang) the same way.
                if not outcome[0] and getattr(outcome[1], "value", None) in stop_codes:
                    break
            with job.lock:
                if not job.cancelled:
                    job.done.set()
            if self.retired:
                return


class Nvml:
    """Bounded, classified access to one NVML module (``pynvml`` or a stand-in with its API).

    ``module=None`` imports ``pynvml`` on first use. ``clock`` (monotonic seconds) only drives
    the slow/parked windows, so tests can move it; call deadlines use real time.
    """

    def __init__(
        self,
        module: Any | None = None,
        *,
        timeout_s: float = 0.5,
        init_timeout_s: float = 30.0,
        slow_for_s: float = 60.0,
        max_stuck_workers: int = 4,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._module = module
        self._timeout = float(timeout_s)
        self._init_timeout = float(init_timeout_s)
        self._slow_for = float(slow_for_s)
        self._max_stuck = max(1, int(max_stuck_workers))
        self._clock = clock
        self._lock = threading.Lock()  # guards init/shutdown; queries come from one thread
        self._initialised = False
        self._unavailable: str | None = None
        self._worker: _Worker | None = None
        self._stuck: list[_Worker] = []
        self._stuck_warned = False
        self._unsupported: set[tuple[str, str]] = set()
        self._warned: set[tuple[str, str]] = set()
        self._alt: dict[tuple[str, str], int] = {}
        self._cooldown: dict[tuple[str, str], float] = {}
        self._slow_until: dict[str, float] = {}
        self._parked_until: dict[str, float] = {}
        self._codes: dict[str, int] = dict(_CODES)
        self._kind_of: dict[int, str] = {}

    # -- module and init ----------------------------------------------------------------------

    @property
    def module(self) -> Any:
        """The NVML module, imported on first use (raises :class:`NvmlUnavailable`)."""
        if self._module is None:
            try:
                import pynvml
            except ImportError as e:
                self._unavailable = f"pynvml is not installed ({e})"
                raise NvmlUnavailable(self._unavailable) from e
            self._module = pynvml
        return self._module

    def code(self, name: str) -> int:
        """An NVML error code by its nvml.h name, as the module defines it."""
        return self._codes[name]

    def _classify_codes(self) -> None:
        m = self._module
        for name, default in _CODES.items():
            self._codes[name] = int(getattr(m, name, default))
        for names, kind in ((_UNSUPPORTED, "unsupported"), (_LOST, "lost"), (_UNAVAILABLE, "unavailable")):
            for n in names:
                self._kind_of[self._codes[n]] = kind
        self._kind_of[self._codes["NVML_ERROR_NOT_FOUND"]] = "absent"

    def _kind(self, e: BaseException) -> str:
        m = self._module
        base = getattr(m, "NVMLError", None)
        if base is not None and isinstance(e, base):
            return self._kind_of.get(getattr(e, "value", None), "transient")  # type: ignore[arg-type]
        # A binding without the function, or with a different signature (old nvidia-ml-py), or
        # nvidia-ml-py's NVMLLibraryMismatchError (an unversioned call the driver lacks): the
        # same as a driver without the function, so the next alternative is tried.
        mismatch = getattr(m, "NVMLLibraryMismatchError", None)
        if isinstance(e, (AttributeError, TypeError, NotImplementedError)) or (
            mismatch is not None and isinstance(e, mismatch)
        ):
            return "unsupported"
        return "error"

    def init(self) -> None:
        """Import and initialise NVML once; raises :class:`NvmlUnavailable` when it cannot work."""
        if self._initialised:
            return
        with self._lock:
            if self._initialised:
                return
            if self._unavailable is not None:
                raise NvmlUnavailable(self._unavailable)
            self.module  # noqa: B018 - the lazy import, raising NvmlUnavailable
            self._classify_codes()
            c = call("init", "nvmlInit")
            job = _Job([c], [0])
            worker = self._get_worker()
            if worker is None:
                raise NvmlUnavailable("earlier NVML calls are still stuck in the driver")
            worker.submit(job)
            if self._wait(job, self._init_timeout) is not None:
                self._abandon_worker()
                self._unavailable = f"nvmlInit did not return within {self._init_timeout:.0f} s"
                raise NvmlUnavailable(self._unavailable)
            outcome = job.results[0]
            if outcome is not None and not outcome[0]:
                e = outcome[1]
                self._unavailable = f"nvmlInit failed: {e}"
                raise NvmlUnavailable(self._unavailable) from e
            self._initialised = True

    @property
    def initialised(self) -> bool:
        return self._initialised

    # -- queries ------------------------------------------------------------------------------

    def query(self, gpu: str, c: Call) -> Any:
        """One field; ``None`` when unsupported, absent, timed out or transiently failing."""
        return self.query_many(gpu, (c,))[c.field]

    def query_many(self, gpu: str, calls: Sequence[Call]) -> dict[str, Any]:
        """Several fields of one GPU in one hand-off to the worker: ``{field: value or None}``.

        Raises :class:`GpuLost` or :class:`NvmlUnavailable`; never blocks much longer than
        ``timeout_s`` per call that hangs, and at most two such calls per GPU per window.
        """
        self.init()
        out: dict[str, Any] = {}
        now = self._clock()
        parked = self._parked_until.get(gpu)
        if parked is not None:
            if parked > now:
                return {c.field: None for c in calls}
            del self._parked_until[gpu]
        todo: list[Call] = []
        unsupported, cooldown = self._unsupported, self._cooldown
        for c in calls:
            key = (gpu, c.field)
            if key in unsupported:
                out[c.field] = None
                continue
            if cooldown:
                until = cooldown.get(key)
                if until is not None:
                    if until > now:
                        out[c.field] = None
                        continue
                    del cooldown[key]
            todo.append(c)
        while todo:
            worker = self._get_worker()
            if worker is None:
                break
            job = _Job(todo, [self._alt.get((gpu, c.field), 0) for c in todo])
            worker.submit(job)
            hung = self._wait(job, self._timeout)
            if hung is not None:
                # Before settling, which may raise: the stuck worker must be replaced either way.
                self._on_timeout(gpu, todo[hung].field)
            for c, outcome in zip(todo, job.results):
                if outcome is not None:
                    self._settle(gpu, c, outcome, out)
            if hung is None or gpu in self._parked_until:
                break
            todo = todo[hung + 1 :]
        for c in calls:
            out.setdefault(c.field, None)
        return out

    def direct(self, name: str, *args: Any) -> Any:
        """Call ``name`` on this thread, without the worker or its deadline: for the Xid thread,
        whose ``nvmlEventSetWait`` blocks by design. Errors are translated like any call's.
        It never initialises NVML itself: a thread outliving :meth:`shutdown` must not reopen it."""
        if not self._initialised:
            raise NvmlUnavailable(self._unavailable or "NVML is not initialised")
        try:
            return getattr(self._module, name)(*args)
        except Exception as e:
            kind = self._kind(e)
            code = getattr(e, "value", None)
            if kind == "unavailable":
                raise NvmlUnavailable(f"{name}: {e}") from e
            if kind == "lost":
                raise GpuLost(SYSTEM, name, str(e), code) from e
            raise NvmlCallError(name, kind, str(e), code) from e

    def unsupported(self, gpu: str, field: str) -> bool:
        return (gpu, field) in self._unsupported

    def is_slow(self, gpu: str) -> bool:
        return self._slow_until.get(gpu, 0.0) > self._clock()

    def is_parked(self, gpu: str) -> bool:
        return self._parked_until.get(gpu, 0.0) > self._clock()

    def forget(self, gpu: str) -> None:
        """Drop what is remembered about ``gpu`` (after it was lost and came back)."""
        for d in (self._unsupported, self._warned):
            for key in [k for k in d if k[0] == gpu]:
                d.discard(key)
        for m in (self._alt, self._cooldown):
            for key in [k for k in m if k[0] == gpu]:
                del m[key]
        self._slow_until.pop(gpu, None)
        self._parked_until.pop(gpu, None)

    def shutdown(self) -> None:
        """``nvmlShutdown`` (bounded like any call) and stop the worker."""
        with self._lock:
            if self._initialised:
                self._initialised = False
                worker = self._get_worker()
                if worker is not None:
                    job = _Job([call("shutdown", "nvmlShutdown")], [0])
                    worker.submit(job)
                    if self._wait(job, self._timeout) is not None:
                        self._abandon_worker()
                    elif job.results[0] is not None and not job.results[0][0]:
                        log.debug("nvml: nvmlShutdown failed: %s", job.results[0][1])
            if self._worker is not None:
                self._worker.stop()
                self._worker = None

    # -- internals ----------------------------------------------------------------------------

    def _invoke(self, c: Call, start: int) -> tuple[int, Any]:
        """Runs on the worker: the first alternative the device supports, from ``start``."""
        m = self._module
        alts = c.alts
        last = len(alts) - 1
        for i in range(start, last + 1):
            a = alts[i]
            try:
                fn = getattr(m, a.name)
                return i, (fn(*a.args, **a.kwargs) if a.kwargs else fn(*a.args))
            except Exception as e:
                if i < last and self._kind(e) == "unsupported":
                    continue
                raise
        raise IndexError(f"no alternative left for {c.field}")

    def _settle(self, gpu: str, c: Call, outcome: tuple[bool, Any], out: dict[str, Any]) -> None:
        ok, payload = outcome
        if ok:
            alt, value = payload
            if alt:
                self._alt[(gpu, c.field)] = alt
            if c.convert is None:
                out[c.field] = value
                return
            try:
                out[c.field] = c.convert(value)
                return
            except Exception as e:
                payload = e
        self._fail(gpu, c.field, payload, out)

    def _fail(self, gpu: str, field: str, e: BaseException, out: dict[str, Any]) -> None:
        out[field] = None
        kind = self._kind(e)
        if kind == "unsupported":
            self._unsupported.add((gpu, field))
            log.info("nvml: %s not supported on %s (%s); not asked again", field, gpu, e)
        elif kind == "lost":
            raise GpuLost(gpu, field, str(e), getattr(e, "value", None)) from e
        elif kind == "unavailable":
            self._unavailable = f"{field} on {gpu}: {e}"
            self._initialised = False
            raise NvmlUnavailable(self._unavailable) from e
        elif kind == "absent":
            pass  # NOT_FOUND: an empty MIG slot, a process that just exited
        elif kind == "transient":
            log.debug("nvml: %s on %s failed this time: %s", field, gpu, e)
        elif (gpu, field) not in self._warned:
            self._warned.add((gpu, field))
            log.warning("nvml: reading %s on %s raised %s: %s", field, gpu, type(e).__name__, e)

    def _wait(self, job: _Job, timeout: float) -> int | None:
        """Wait for ``job``; the index of the call that overran ``timeout`` (job cancelled), or
        ``None`` when the job finished."""
        done = job.done
        while True:
            idx, started = job.mark
            left = started + timeout - time.monotonic()
            if left > 0 and done.wait(left):
                return None
            with job.lock:
                if done.is_set():
                    return None
                if job.mark == (idx, started) and time.monotonic() - started >= timeout:
                    job.cancelled = True
                    return idx

    def _get_worker(self) -> _Worker | None:
        if self._worker is not None:
            return self._worker
        self._stuck = [w for w in self._stuck if w.thread.is_alive()]
        if len(self._stuck) >= self._max_stuck:
            if not self._stuck_warned:
                self._stuck_warned = True
                log.warning(
                    "nvml: %d calls are still stuck in the driver; answering None until one returns",
                    len(self._stuck),
                )
            return None
        self._stuck_warned = False
        stop = frozenset(c for c, k in self._kind_of.items() if k in ("lost", "unavailable"))
        self._worker = _Worker(self._invoke, stop)
        return self._worker

    def _abandon_worker(self) -> None:
        w = self._worker
        if w is not None:
            w.retired = True
            self._stuck.append(w)
            self._worker = None

    def _on_timeout(self, gpu: str, field: str) -> None:
        self._abandon_worker()
        now = self._clock()
        until = now + self._slow_for
        self._cooldown[(gpu, field)] = until
        if self._slow_until.get(gpu, 0.0) > now:
            self._parked_until[gpu] = until
            log.warning(
                "nvml: %s hangs again (%s did not return within %.2f s); not asked for %.0f s",
                gpu,
                field,
                self._timeout,
                self._slow_for,
            )
        else:
            log.warning(
                "nvml: %s on %s did not return within %.2f s; %s marked slow, field skipped for %.0f s",
                field,
                gpu,
                self._timeout,
                gpu,
                self._slow_for,
            )
        self._slow_until[gpu] = until
