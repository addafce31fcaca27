"""``oom_guard``: report an out-of-memory failure with what explains it, then re-raise it.

Recognised: ``torch.OutOfMemoryError`` and the older ``RuntimeError: CUDA out of memory``
(kind ``cuda_oom``), cuBLAS/cuDNN allocation failures (``cuda_oom``), torch's CPU allocator
failure ``DefaultCPUAllocator: can't allocate memory`` and ``MemoryError`` (kind ``host_oom``).
The exception is never swallowed or wrapped: the guard returns False from ``__exit__`` and the
decorator re-raises with a bare ``raise``, so the traceback is the original one.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fleetscope.agent.classify._units import parse_size
from fleetscope.agent.sdk import _runtime
from fleetscope.agent.sdk._facts import human_bytes
from fleetscope.agent.sdk._kinds import KIND_CUDA_OOM, KIND_HOST_OOM
from fleetscope.agent.sdk._memory import cuda_memory, cuda_torch, host_memory
from fleetscope.agent.sdk._shapes import batch_size_of, describe_values
from fleetscope.agent.sdk._steps import current_step

F = TypeVar("F", bound=Callable[..., Any])

SNAPSHOT_DIR_ENV = "FLEETSCOPE_SDK_SNAPSHOT_DIR"
_MAX_EXCERPT = 16_000  # the memory summary is ~3 KB; the rest is room for a long message
_REPORTED_ATTR = "_fleetscope_oom_reported"

_SIZE = r"([0-9]+(?:\.[0-9]+)?\s*[KMGTPE]?i?B)"
_RE_CUDA_TRIED = re.compile(r"Tried to allocate " + _SIZE, re.IGNORECASE)
_RE_CUDA_GPU = re.compile(r"GPU (\d+)")
_RE_CUDA_TOTAL_NEW = re.compile(r"total capacity of " + _SIZE + r" of which " + _SIZE + r" is free", re.I)
_RE_CUDA_TOTAL_OLD = re.compile(_SIZE + r" total capacity", re.IGNORECASE)
_RE_CUDA_FREE_OLD = re.compile(_SIZE + r" free", re.IGNORECASE)
_RE_CUDA_BY_TORCH = re.compile(
    r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch, and " + _SIZE + r" is reserved", re.I
)
_RE_CUDA_ALLOCATED_OLD = re.compile(_SIZE + r" already allocated", re.IGNORECASE)
_RE_CUDA_RESERVED_OLD = re.compile(_SIZE + r" reserved in total by PyTorch", re.IGNORECASE)
_RE_CPU_BYTES = re.compile(r"you tried to allocate (\d+) bytes", re.IGNORECASE)
_RE_NUMPY = re.compile(r"Unable to allocate " + _SIZE, re.IGNORECASE)
_CUDA_MARKERS = (
    "cuda out of memory",
    "cuda error: out of memory",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "cudaerrormemoryallocation",
    "hip out of memory",
)

_EXTRA_UNITS = {"pib": 1024**5, "eib": 1024**6, "pb": 1024**5, "eb": 1024**6}


def _size(text: str) -> int | None:
    compact = text.replace(" ", "")
    unit = compact.lstrip("0123456789.").lower()
    if unit in _EXTRA_UNITS:  # parse_size stops at TiB; a bogus huge request prints EiB
        try:
            return int(float(compact[: len(compact) - len(unit)]) * _EXTRA_UNITS[unit])
        except ValueError:
            return None
    try:
        return parse_size(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class OomInfo:
    """What the exception itself says about an allocation failure."""

    kind: str  # KIND_CUDA_OOM or KIND_HOST_OOM
    exception_type: str
    message: str
    requested_bytes: int | None = None
    device: str | None = None  # "cuda:0", "cpu"
    facts: Mapping[str, object] = field(default_factory=dict)


def _exception_type(exc: BaseException) -> str:
    t = type(exc)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def classify_oom(exc: BaseException) -> OomInfo | None:
    """The allocation failure ``exc`` reports, or None when it is not one."""
    message = str(exc)
    lower = message.lower()
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    is_torch_oom = oom_type is not None and isinstance(exc, oom_type)
    if is_torch_oom or (isinstance(exc, RuntimeError) and any(m in lower for m in _CUDA_MARKERS)):
        return _classify_cuda(exc, message)
    if isinstance(exc, RuntimeError) and "defaultcpuallocator" in lower and "allocate" in lower:
        m = _RE_CPU_BYTES.search(message)
        return OomInfo(
            kind=KIND_HOST_OOM,
            exception_type=_exception_type(exc),
            message=message,
            requested_bytes=int(m.group(1)) if m else None,
            device="cpu",
            facts={"allocator": "DefaultCPUAllocator"},
        )
    if isinstance(exc, MemoryError):
        m = _RE_NUMPY.search(message)
        facts: dict[str, object] = {}
        # numpy's _ArrayMemoryError carries the array it could not make.
        shape = getattr(exc, "shape", None)
        if shape is not None:
            facts["array_shape"] = "[" + ", ".join(str(d) for d in shape) + "]"
        dtype = getattr(exc, "dtype", None)
        if dtype is not None:
            facts["array_dtype"] = str(dtype)
        return OomInfo(
            kind=KIND_HOST_OOM,
            exception_type=_exception_type(exc),
            message=message,
            requested_bytes=_size(m.group(1)) if m else None,
            device="cpu",
            facts=facts,
        )
    return None


def _classify_cuda(exc: BaseException, message: str) -> OomInfo:
    facts: dict[str, object] = {}
    tried = _RE_CUDA_TRIED.search(message)
    gpu = _RE_CUDA_GPU.search(message)
    new_total = _RE_CUDA_TOTAL_NEW.search(message)
    if new_total:
        facts["total_capacity_bytes"] = _size(new_total.group(1))
        facts["free_bytes"] = _size(new_total.group(2))
    else:
        old_total = _RE_CUDA_TOTAL_OLD.search(message)
        old_free = _RE_CUDA_FREE_OLD.search(message)
        if old_total:
            facts["total_capacity_bytes"] = _size(old_total.group(1))
        if old_free:
            facts["free_bytes"] = _size(old_free.group(1))
    by_torch = _RE_CUDA_BY_TORCH.search(message)
    if by_torch:
        facts["allocated_by_pytorch_bytes"] = _size(by_torch.group(1))
        facts["reserved_unallocated_bytes"] = _size(by_torch.group(2))
    else:
        allocated = _RE_CUDA_ALLOCATED_OLD.search(message)
        reserved = _RE_CUDA_RESERVED_OLD.search(message)
        if allocated:
            facts["allocated_by_pytorch_bytes"] = _size(allocated.group(1))
        if reserved:
            facts["reserved_by_pytorch_bytes"] = _size(reserved.group(1))
    return OomInfo(
        kind=KIND_CUDA_OOM,
        exception_type=_exception_type(exc),
        message=message,
        requested_bytes=_size(tried.group(1)) if tried else None,
        device=f"cuda:{gpu.group(1)}" if gpu else None,
        facts=facts,
    )


def _snapshot_dir() -> str:
    return os.environ.get(SNAPSHOT_DIR_ENV) or tempfile.gettempdir()


def _dump_memory_history(torch: Any, snapshot_dir: str | None) -> str | None:
    """Write torch's allocation history when the user recorded it; the pickle's path, else None."""
    try:
        enabled = getattr(torch._C, "_cuda_isHistoryEnabled", None)
        if enabled is None or not enabled():
            return None
        directory = snapshot_dir or _snapshot_dir()
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"fleetscope-oom-{os.getpid()}-{time.time_ns()}.pickle")
        torch.cuda.memory._dump_snapshot(path)
        return path
    except Exception:
        return None


def _mark(exc: BaseException) -> bool:
    """True the first time: nested guards and the excepthook report one exception once."""
    if getattr(exc, _REPORTED_ATTR, False):
        return False
    try:
        setattr(exc, _REPORTED_ATTR, True)
    except Exception:
        pass
    return True


def report_oom(
    exc: BaseException,
    *,
    name: str | None = None,
    arguments: Mapping[str, object] | None = None,
    batch_size: int | None = None,
    flush_timeout_s: float | None = None,
    snapshot_dir: str | None = None,
) -> bool:
    """Report ``exc`` as an OOM incident when it is one; True when it was reported now.

    For programs that catch the error themselves (to retry with a smaller batch, say). Never
    raises. ``arguments`` maps names to the guarded call's arguments, whose shapes are recorded.
    """
    try:
        info = classify_oom(exc)
        if info is None or not _mark(exc):
            return False
        _send(info, name, arguments, batch_size, snapshot_dir)
        timeout = _runtime.get_config().oom_flush_timeout_s if flush_timeout_s is None else flush_timeout_s
        # The program is probably about to die of this: get the incident out now, bounded.
        _runtime.flush(timeout)
        return True
    except Exception:
        return False


def _send(
    info: OomInfo,
    name: str | None,
    arguments: Mapping[str, object] | None,
    batch_size: int | None,
    snapshot_dir: str | None,
) -> None:
    facts: dict[str, object] = {
        "exception_type": info.exception_type,
        "requested_bytes": info.requested_bytes,
        "device": info.device,
        "pid": os.getpid(),
    }
    if name:
        facts["guard"] = name
    facts.update(info.facts)
    step = current_step()
    if step is not None:
        facts["loop"] = step.name
        facts["step"] = step.step
    if arguments:
        facts.update(describe_values(arguments))
        if batch_size is None:
            batch_size = batch_size_of(list(arguments.values()))
    if batch_size is None and step is not None:
        batch_size = step.batch_size
    facts["batch_size"] = batch_size
    excerpt = info.message
    torch = cuda_torch()
    if info.kind == KIND_CUDA_OOM and torch is not None:
        device = info.device or None
        mem = cuda_memory(device)
        if mem is not None:
            facts.update(mem.facts("cuda."))
        try:
            summary = torch.cuda.memory_summary(mem.device if mem is not None else None, abbreviated=True)
            excerpt = f"{excerpt}\n\n{summary}"
        except Exception:
            pass
        facts["memory_snapshot_path"] = _dump_memory_history(torch, snapshot_dir)
    else:
        facts.update({f"host.{k}": v for k, v in host_memory().items()})
        mem = cuda_memory() if torch is not None else None
        if mem is not None:
            facts.update(mem.facts("cuda."))
    where = info.device or ("GPU" if info.kind == KIND_CUDA_OOM else "host")
    label = "CUDA OOM" if info.kind == KIND_CUDA_OOM else "Host OOM"
    title = f"{label} on {where}: tried to allocate {human_bytes(info.requested_bytes)}"
    if name:
        title += f" in {name}"
    if len(excerpt) > _MAX_EXCERPT:
        excerpt = excerpt[: _MAX_EXCERPT - 3] + "..."
    _runtime.report_incident(
        info.kind,
        "error",
        title,
        facts,
        excerpt=excerpt,
    )


def _bind(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, object]:
    """Argument names for the shapes in the incident; only run once an OOM happened."""
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs)
        out: dict[str, object] = {}
        for key, value in bound.arguments.items():
            param = bound.signature.parameters[key]
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                out.update({f"{key}[{i}]": v for i, v in enumerate(value)})
            elif param.kind is inspect.Parameter.VAR_KEYWORD:
                out.update(value)
            else:
                out[key] = value
        return out
    except (TypeError, ValueError):
        out = {str(i): a for i, a in enumerate(args)}
        out.update(kwargs)
        return out


class oom_guard:  # noqa: N801 - used like a function: `with oom_guard():` and `@oom_guard()`
    """Report an OOM raised inside a block or a function, then let it propagate unchanged.

    As a decorator it also records the shapes, dtypes and devices of the call's tensor
    arguments and the batch size (first dimension of the first tensor). ``batch_size``
    overrides the guess; inside ``train_steps`` the loop's step and batch size are added.
    """

    __slots__ = ("_name", "_batch_size", "_flush_timeout_s", "_snapshot_dir")

    def __init__(
        self,
        name: str | None = None,
        *,
        batch_size: int | None = None,
        flush_timeout_s: float | None = None,
        snapshot_dir: str | None = None,
    ) -> None:
        self._name = name
        self._batch_size = batch_size
        self._flush_timeout_s = flush_timeout_s
        self._snapshot_dir = snapshot_dir

    def __enter__(self) -> oom_guard:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            report_oom(
                exc,
                name=self._name,
                batch_size=self._batch_size,
                flush_timeout_s=self._flush_timeout_s,
                snapshot_dir=self._snapshot_dir,
            )

    def __call__(self, fn: F) -> F:
        name = self._name or getattr(fn, "__qualname__", None)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                if classify_oom(exc) is not None:
                    report_oom(
                        exc,
                        name=name,
                        arguments=_bind(fn, args, kwargs),
                        batch_size=self._batch_size,
                        flush_timeout_s=self._flush_timeout_s,
                        snapshot_dir=self._snapshot_dir,
                    )
                raise

        return wrapper  # type: ignore[return-value]


_hook_lock = threading.Lock()
_uninstall: Callable[[], None] | None = None


def install_oom_hook() -> Callable[[], None]:
    """Report OOMs that nothing caught, via ``sys.excepthook`` and ``threading.excepthook``.

    The previous hooks still run afterwards (the traceback is printed as before). Returns a
    function that puts the previous hooks back; installing twice returns the same one.
    """
    global _uninstall
    with _hook_lock:
        if _uninstall is not None:
            return _uninstall
        prev_sys = sys.excepthook
        prev_thread = threading.excepthook

        def sys_hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
            report_oom(exc)
            prev_sys(exc_type, exc, tb)

        def thread_hook(args: Any) -> None:
            if args.exc_value is not None:
                report_oom(args.exc_value)
            prev_thread(args)

        sys.excepthook = sys_hook
        threading.excepthook = thread_hook

        def uninstall() -> None:
            global _uninstall
            with _hook_lock:
                if sys.excepthook is sys_hook:
                    sys.excepthook = prev_sys
                if threading.excepthook is thread_hook:
                    threading.excepthook = prev_thread
                _uninstall = None

        _uninstall = uninstall
        return uninstall
