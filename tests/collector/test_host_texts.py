"""The newest host row's text columns (what ``host_latest`` keeps) are the ones every row's
would give: per-core figures and top processes read for one row, from a plain batch's message
or from a compact section's fields."""

from __future__ import annotations

from fleetscope.collector.ingest.validation import Limits, expand_compact, validate_batch
from fleetscope.collector.storage.rows import host_texts, host_texts_of_row
from fleetscope.proto.compact import compact
from fleetscope.proto.v1 import telemetry_pb2 as pb

S = 10**9


def _host_batch() -> pb.Batch:
    """Rows with and without per-core figures and processes, of uneven counts."""
    batch = pb.Batch(agent_id="a", boot_id="b", seq=1, created_ns=100 * S, sent_ns=100 * S)
    h = batch.host
    cores = [2, 0, 3, 1]
    procs = [1, 2, 0, 3]
    h.ts_ns.extend([(90 + i) * S for i in range(4)])
    h.cpu_percent.values.extend([10.0, 20.0, 30.0, 40.0])
    h.core_count.extend(cores)
    h.cpu_core_percent.extend([float(k) * 1.5 for k in range(sum(cores))])
    h.cpu_core_freq_mhz.extend([1000.0 + k for k in range(sum(cores))])
    h.process_count.extend(procs)
    t = h.processes
    t.pid.extend(range(100, 100 + sum(procs)))
    t.name.extend(f"proc{k}" for k in range(sum(procs)))
    t.cpu_percent.values.extend([float(k) for k in range(sum(procs))])
    t.cpu_percent.null_rows.append(2)
    t.rss_bytes.values.extend([float(k << 20) for k in range(sum(procs))])
    t.container_id.extend(["", "abc", "", "def", "", ""])
    return batch


def test_one_row_texts_are_that_row_of_all_rows_texts() -> None:
    host = _host_batch().host
    cores, procs = host_texts(host, 4)
    assert cores[1] is None and procs[2] is None and cores[0] is not None and procs[3] is not None
    for i in range(4):
        assert host_texts_of_row(host, 4, i) == (cores[i], procs[i])


def test_a_compact_batch_decodes_to_the_same_texts_as_its_plain_form() -> None:
    plain = _host_batch()
    want = host_texts(plain.host, 4)
    batch = compact(_host_batch())
    unfolded = expand_compact(batch, Limits())
    assert unfolded is not None and not batch.HasField("host"), "the samples stay out of the protobuf batch"
    decoded = validate_batch(batch, Limits(), unfolded=unfolded)
    assert decoded.sample_rows == 4 and decoded.host_ts.tolist() == list(plain.host.ts_ns)
    assert list(decoded.host["cpu_percent"]) == [10.0, 20.0, 30.0, 40.0]
    assert list(decoded.host["load1"]) == [None] * 4
    got = host_texts(decoded.host_fields, 4)
    assert got == want
