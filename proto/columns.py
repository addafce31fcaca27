"""Columnar encoding helpers shared by the agent (encode) and the collector (decode).

A ``Column`` carries one double per row plus the indexes of rows without a reading; see the
header of ``v1/telemetry.proto``. These helpers are the only code that knows that layout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fleetscope.proto.v1 import telemetry_pb2 as pb

# Value columns of each sample message, in field-number order (everything that is a Column).
HOST_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in pb.HostSamples.DESCRIPTOR.fields if f.message_type is pb.Column.DESCRIPTOR
)
GPU_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in pb.GpuSamples.DESCRIPTOR.fields if f.message_type is pb.Column.DESCRIPTOR
)
PROCESS_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in pb.ProcessTable.DESCRIPTOR.fields if f.message_type is pb.Column.DESCRIPTOR
)


def fill_column(column: Any, values: Sequence[float | int | None]) -> None:
    """Write ``values`` (None = no reading) into an empty ``pb.Column``.

    A column whose every value is None is left empty: the field is "not reported" for the
    whole batch, which costs nothing on the wire.
    """
    if all(v is None for v in values):
        return
    if None in values:
        column.null_rows.extend(i for i, v in enumerate(values) if v is None)
        column.values.extend(0.0 if v is None else v for v in values)
    else:
        column.values.extend(values)


def read_column(column: Any, rows: int) -> list[float | None]:
    """The column as a list with None for missing rows (all None when not reported)."""
    values = column.values
    if not values:
        return [None] * rows
    out: list[float | None] = list(values)
    for i in column.null_rows:
        out[i] = None
    return out


class ColumnError(ValueError):
    """A column does not fit its batch; ``field`` names it for the INVALID_ARGUMENT status."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def check_column(
    column: Any,
    rows: int,
    field: str,
    *,
    minimum: float | None = 0.0,
    maximum: float | None = None,
) -> None:
    """Validate shape and range without a Python loop over the values in the common case."""
    values = column.values
    if not values:
        if column.null_rows:
            raise ColumnError(field, "null_rows given without values")
        return
    if len(values) != rows:
        raise ColumnError(field, f"has {len(values)} values for {rows} rows")
    nulls = column.null_rows
    if nulls and (max(nulls) >= rows):
        raise ColumnError(field, f"null row index {max(nulls)} out of range for {rows} rows")
    # sum() runs in C and is NaN/inf when any value is: only then look for the culprit.
    if not math.isfinite(sum(values)):
        for i, v in enumerate(values):
            if not math.isfinite(v):
                raise ColumnError(f"{field}[{i}]", f"{v} is not a finite number (use null_rows for no reading)")
    if minimum is not None and min(values) < minimum:
        i = min(range(len(values)), key=values.__getitem__)
        if i not in set(nulls):
            raise ColumnError(f"{field}[{i}]", f"{values[i]} is below {minimum}")
    if maximum is not None and max(values) > maximum:
        i = max(range(len(values)), key=values.__getitem__)
        if i not in set(nulls):
            raise ColumnError(f"{field}[{i}]", f"{values[i]} is above {maximum}")
