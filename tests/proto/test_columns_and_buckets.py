from __future__ import annotations

import math
import random

import pytest

from fleetscope.proto import buckets
from fleetscope.proto.columns import ColumnError, check_column, fill_column, read_column
from fleetscope.proto.v1 import telemetry_pb2 as pb


def test_column_round_trip_with_missing_rows() -> None:
    col = pb.Column()
    fill_column(col, [1.5, None, 3.0, None])
    assert list(col.null_rows) == [1, 3]
    assert read_column(col, 4) == [1.5, None, 3.0, None]


def test_all_missing_column_costs_nothing() -> None:
    col = pb.Column()
    fill_column(col, [None, None])
    assert col.ByteSize() == 0
    assert read_column(col, 2) == [None, None]


@pytest.mark.parametrize(
    ("values", "kwargs", "message"),
    [
        ([1.0, math.nan], {}, "col[1]: nan is not a finite number"),
        ([1.0, math.inf], {}, "col[1]: inf is not a finite number"),
        ([1.0, -2.0], {}, "col[1]: -2.0 is below 0.0"),
        ([99.0, 101.0], {"maximum": 100.0}, "col[1]: 101.0 is above 100.0"),
    ],
)
def test_check_column_names_the_bad_row(values: list[float], kwargs: dict, message: str) -> None:
    col = pb.Column()
    col.values.extend(values)
    with pytest.raises(ColumnError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_column(col, len(values), "col", **kwargs)


def test_check_column_shape() -> None:
    col = pb.Column()
    col.values.extend([1.0, 2.0])
    with pytest.raises(ColumnError, match="has 2 values for 3 rows"):
        check_column(col, 3, "col")
    col.null_rows.append(5)
    with pytest.raises(ColumnError, match="out of range"):
        check_column(col, 2, "col")


def test_bucket_relative_error_bound() -> None:
    rng = random.Random(1)
    for _ in range(10_000):
        v = math.exp(rng.uniform(0, 30))
        rep = buckets.bucket_value(buckets.bucket_index(v))
        assert abs(rep - v) / v <= buckets.RELATIVE_ERROR + 1e-12


def test_quantiles_from_merged_histograms() -> None:
    a = {buckets.bucket_index(v): 1 for v in (1e6,)}
    b = {buckets.bucket_index(2e6): 98, buckets.bucket_index(1e9): 1}
    merged = buckets.merge([a, b])
    assert sum(merged.values()) == 100
    p50 = buckets.quantile(merged, 0.5)
    assert p50 is not None and abs(p50 - 2e6) / 2e6 < 0.02
    p100 = buckets.quantile(merged, 1.0)
    assert p100 is not None and abs(p100 - 1e9) / 1e9 < 0.02
    assert buckets.quantile({}, 0.5) is None
