"""Columnar encoding helpers shared by the agent (encode) and the collector (decode).

A ``Column`` carries one double per row plus the indexes of rows without a reading; see the
header of ``v1/telemetry.proto``. These helpers are the only code that knows that layout.
"""

from __future__ import annotations

import math
import sys
from array import array
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


_NATIVE_LITTLE_ENDIAN = sys.byteorder == "little"


def column_values(column: Any) -> Sequence[float]:
    """The raw ``values`` of a Column, fast: an ``array('d')`` copied from the packed bytes.

    Iterating a repeated field from Python costs about 50 ns per element; the packed field's
    bytes are already little-endian doubles, so on little-endian hosts (x86, ARM) one memcpy
    replaces that loop. Null rows are not applied here (see ``with_nulls``).
    """
    if not _NATIVE_LITTLE_ENDIAN:
        return list(column.values)
    data = column.SerializeToString()
    if not data or data[0] != 0x0A:  # field 1 (values), length-delimited; absent when empty
        return array("d")
    length, shift, i = 0, 0, 1
    while True:
        byte = data[i]
        i += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    values = array("d")
    values.frombytes(data[i : i + length])
    return values


def with_nulls(values: Sequence[float], null_rows: Sequence[int], rows: int) -> Sequence[float | None]:
    """Values with None at the null rows; all None when the column is empty."""
    if not len(values):
        return [None] * rows
    if not null_rows:
        return values
    out: list[float | None] = list(values)
    for i in null_rows:
        out[i] = None
    return out


def read_column(column: Any, rows: int) -> list[float | None]:
    """The column as a list with None for missing rows (all None when not reported)."""
    return list(with_nulls(column_values(column), column.null_rows, rows))


class ColumnError(ValueError):
    """A column does not fit its batch; ``field`` names it for the INVALID_ARGUMENT status."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def check_values(
    values: Sequence[float],
    null_rows: Sequence[int],
    rows: int,
    field: str,
    *,
    minimum: float | None = 0.0,
    maximum: float | None = None,
) -> None:
    """Validate shape and range without a Python loop over the values in the common case."""
    if not len(values):
        if null_rows:
            raise ColumnError(field, "null_rows given without values")
        return
    if len(values) != rows:
        raise ColumnError(field, f"has {len(values)} values for {rows} rows")
    if null_rows and max(null_rows) >= rows:
        raise ColumnError(field, f"null row index {max(null_rows)} out of range for {rows} rows")
    # sum() runs in C and is NaN/inf when any value is: only then look for the culprit.
    if not math.isfinite(sum(values)):
        for i, v in enumerate(values):
            if not math.isfinite(v):
                raise ColumnError(f"{field}[{i}]", f"{v} is not a finite number (use null_rows for no reading)")
    nulls = set(null_rows)
    if minimum is not None and min(values) < minimum:
        for i, v in enumerate(values):
            if v < minimum and i not in nulls:
                raise ColumnError(f"{field}[{i}]", f"{v} is below {minimum}")
    if maximum is not None and max(values) > maximum:
        for i, v in enumerate(values):
            if v > maximum and i not in nulls:
                raise ColumnError(f"{field}[{i}]", f"{v} is above {maximum}")


def check_column(column: Any, rows: int, field: str, *, minimum: float | None = 0.0, maximum: float | None = None) -> Sequence[float | None]:
    """Validate a Column and return its decoded values (None at null rows)."""
    values = column_values(column)
    check_values(values, column.null_rows, rows, field, minimum=minimum, maximum=maximum)
    return with_nulls(values, column.null_rows, rows)
