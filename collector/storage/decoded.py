"""A validated batch's samples, decoded once: what ingest hands the writer beside the batch."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    import numpy as np

    from fleetscope.proto.v1 import telemetry_pb2 as pb

__all__ = ["ColumnView", "Decoded"]


class ColumnView(Sequence["float | None"]):
    """A reading column held as a float64 array, read as the plain wire's rows: None at a null
    row, a Python float elsewhere. A compact batch's columns stay arrays this way (no list per
    column); ``numpy.asarray`` of it gives the values with NaN at the null rows."""

    __slots__ = ("array", "null_rows", "_nulls")

    def __init__(self, array: np.ndarray, null_rows: np.ndarray | None = None) -> None:
        self.array = array
        self.null_rows = null_rows
        self._nulls = frozenset(null_rows.tolist()) if null_rows is not None and len(null_rows) else frozenset()

    def __len__(self) -> int:
        return len(self.array)

    @overload
    def __getitem__(self, i: int) -> float | None: ...
    @overload
    def __getitem__(self, i: slice) -> list[float | None]: ...
    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return self.tolist()[i]
        if self._nulls and int(i) % len(self.array) in self._nulls:
            return None
        return float(self.array[i])

    def tolist(self) -> list[float | None]:
        out: list[float | None] = self.array.tolist()
        for i in self._nulls:
            out[i] = None
        return out

    def __iter__(self) -> Iterator[float | None]:
        return iter(self.tolist())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        import numpy as np

        out = np.array(self.array, dtype=np.float64)
        if self._nulls:
            out[self.null_rows] = np.nan
        return out if dtype is None else out.astype(dtype)


@dataclass
class Decoded:
    """The samples of a validated batch, decoded once for the writer.

    ``host``/``gpu``: each reading column (None at null rows; all None when not reported).
    ``host_ts``/``gpu_ts``/``gpu_index``: the rows' times (as the agent stamped them) and GPUs.
    ``host_fields``/``gpu_fields``: the messages holding the per-core figures and process tables
    (the batch's own for a plain batch; for a compact one, what its sections held besides
    readings, times and GPUs, which stay out of protobuf: ``compact_numpy.read_sample_section``).
    """

    host: dict[str, Sequence[float | None]] = field(default_factory=dict)
    gpu: dict[str, Sequence[float | None]] = field(default_factory=dict)
    sample_rows: int = 0
    host_ts: np.ndarray = field(default_factory=lambda: _no_ints())
    gpu_ts: np.ndarray = field(default_factory=lambda: _no_ints())
    gpu_index: np.ndarray = field(default_factory=lambda: _no_ints())
    host_fields: pb.HostSamples = field(default_factory=lambda: _message("HostSamples"))
    gpu_fields: pb.GpuSamples = field(default_factory=lambda: _message("GpuSamples"))


def _no_ints() -> np.ndarray:
    import numpy as np

    return np.empty(0, dtype=np.int64)


def _message(name: str) -> Any:
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    return getattr(pb, name)()
