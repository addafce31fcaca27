"""Checking a batch against the wire contract before anything of it is stored.

A batch that breaks a rule is rejected whole with ``BatchInvalid`` naming the field (e.g.
``gpu.temp_c[3]: -400.0 is below -60``); the collector acknowledges it as REJECTED with
INVALID_ARGUMENT, so the agent stops resending it, and goes on with the stream. The checks are
written to avoid Python loops over values in the common case (see ``check_column``): they sit
on the ingest hot path.

Besides the wire contract, validation catches every value that one of the databases cannot
store, because a transaction that fails on data would otherwise look like an outage: text with
NUL characters (PostgreSQL's text types refuse them), NaN or infinity in facts and counters
(PostgreSQL's JSON refuses them, and ``--json`` output would not be JSON), integers outside
int64 (both databases' BIGINT), and text longer than its column. A NUL in text a user reads as
a log (a log line, an incident's title, excerpt or source: crash-padded files have them) is
repaired losslessly instead, by ``repair_nul``: the line is kept with U+FFFD in place of each NUL.
Identifiers (names, kinds, label keys and values) with a NUL are rejected: a changed name
would be a different series.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import Message

from fleetscope.collector.errors import BatchInvalid
from fleetscope.collector.storage.compact_numpy import NUMPY, SectionArrays, read_sample_section
from fleetscope.collector.storage.decoded import ColumnView, Decoded
from fleetscope.proto.columns import (
    GPU_COLUMNS,
    HOST_COLUMNS,
    PROCESS_COLUMNS,
    ColumnError,
    check_values,
    column_values,
)
from fleetscope.proto.compact import SECTION_GPU, SECTION_HOST, CompactError, _Budget, expand
from fleetscope.proto.exponential import SCHEMES as LATENCY_SCHEMES
from fleetscope.proto.v1 import telemetry_pb2 as pb

INT64_MAX = 2**63 - 1
# Timestamps (nanoseconds since 1970) must lie in [0, 2^62), before the year 2116: far beyond any
# real clock, and small enough that a skew correction (received - sent_ns, both in that range)
# added to one can never leave int64.
MAX_TIMESTAMP_NS = 2**62
NUL = "\x00"
NUL_REPLACEMENT = "\ufffd"  # what a NUL in a log line becomes: visible, and never mistaken for text


@dataclass(frozen=True)
class Limits:
    """Every bound a sender's data must respect; each is enforced with a rejection naming the field.

    Batches (``validate_batch``) and registrations (``validate_registration``) share them.
    Column-bound limits (``max_agent_id_chars``, ``max_kind_chars``, ``max_name_chars``,
    ``max_hostname_chars``, ``max_version_chars``) are the widths of the columns in
    ``storage/schema.py``; the others keep one sender from filling the database or making
    queries over it slow (a 30 MB inventory is read back by every ``fleetscope devices``).
    """

    max_rows: int = 50_000  # sample rows (host + GPU) per batch
    max_logs: int = 20_000  # log events per batch
    max_incidents: int = 1_000  # incidents per batch
    max_metrics: int = 20_000  # metric points per batch
    max_latency: int = 10_000  # latency histograms per batch
    max_inventory_records: int = 1_000  # inventory records per batch
    max_message_chars: int = 65_536  # a log message, an incident's title or excerpt, a fact's text
    max_source_chars: int = 4_096  # a log's or an incident's source (a file path)
    max_name_chars: int = 200  # a device, metric, histogram or inventory name (String(200))
    max_kind_chars: int = 64  # an incident's or inventory record's kind (String(64))
    max_agent_id_chars: int = 64  # agent_id and boot_id (String(64) in devices and ingested_batches)
    max_hostname_chars: int = 255  # devices.hostname (String(255))
    max_version_chars: int = 64  # devices.agent_version (String(64)), each capability name
    max_capabilities: int = 64  # capability names per registration
    max_labels: int = 64  # labels per device, histogram or metric point
    max_label_key_chars: int = 128  # a label's key
    max_label_value_chars: int = 1_024  # a label's value
    max_facts: int = 256  # facts per incident or inventory record
    # A compact-v1 blob (Batch.compact) unfolds within these before anything else is checked:
    # a few KB of zstd must not become gigabytes of body or a billion values.
    max_compact_body_bytes: int = 32 << 20
    max_compact_values: int = 4_000_000
    max_fact_key_chars: int = 128  # a fact's key
    max_inventory_bytes: int = 256 * 1024  # a registration's encoded inventory (hundreds of GPUs fit)
    max_counter_text_chars: int = 4_096  # the agent's counters.last_rejection
    max_future_ns: int = 10 * 60 * 10**9  # a row stamped after the batch was sent, by more than this, is wrong
    max_age_ns: int = 30 * 86_400 * 10**9  # a drone may be offline for long; a month is the bound
    max_gpus: int = 256


# (minimum, maximum) per value column; None leaves a side open.
_HOST_RANGES: dict[str, tuple[float | None, float | None]] = {
    "cpu_percent": (0.0, 100.0),
    "load1": (0.0, None),
    "load5": (0.0, None),
    "load15": (0.0, None),
}
_GPU_RANGES: dict[str, tuple[float | None, float | None]] = {
    "util_gpu_percent": (0.0, 100.0),
    "util_memory_percent": (0.0, 100.0),
    "util_encoder_percent": (0.0, 100.0),
    "util_decoder_percent": (0.0, 100.0),
    "temp_c": (-60.0, 200.0),
    "memory_temp_c": (-60.0, 200.0),
    "power_w": (0.0, 10_000.0),
    "power_limit_w": (0.0, 10_000.0),
    "pstate": (0.0, 32.0),
    "fan_percent": (0.0, 255.0),
}


def _check_ts(values: Sequence[int] | np.ndarray, rows: int, field: str, sent_ns: int, limits: Limits) -> None:
    """``values``: an int64 array, a repeated int64 field or a list of timestamps."""
    if len(values) != rows:
        raise BatchInvalid(field, f"has {len(values)} timestamps for {rows} rows")
    if not rows:
        return
    if isinstance(values, np.ndarray):
        lo, hi = int(values.min()), int(values.max())
    else:
        lo, hi = min(values), max(values)
    if hi > sent_ns + limits.max_future_ns:
        raise BatchInvalid(field, f"timestamp {hi} is {(hi - sent_ns) / 1e9:.0f} s after the batch was sent")
    if lo < sent_ns - limits.max_age_ns:
        raise BatchInvalid(field, f"timestamp {lo} is {(sent_ns - lo) / 86_400e9:.1f} days before the batch was sent")


_Columns = dict[str, tuple[np.ndarray, np.ndarray | None]]


def _message_columns(msg: Message, names: tuple[str, ...]) -> _Columns:
    """A plain message's reading columns as (values, null rows), the form a compact section is
    read into (``compact_numpy.read_sample_section``); a column without values is left out,
    unless it names null rows, which ``_check_columns`` refuses."""
    out: _Columns = {}
    for name in names:
        column = getattr(msg, name)
        values = column_values(column)
        nulls = column.null_rows
        if len(values) or nulls:
            a = np.frombuffer(values, dtype="<f8") if isinstance(values, array) else np.asarray(values, dtype="<f8")
            out[name] = (a, np.asarray(nulls, dtype=np.int64) if nulls else None)
    return out


def _check_columns(columns: _Columns, names: tuple[str, ...], rows: int, prefix: str, ranges: dict) -> dict[str, Sequence[float | None]]:
    """Check every reading column and return them as the writer reads them (``ColumnView``: None
    at null rows; all None when the column was not reported).

    The columns of the right length are checked together, as one 2-D array (one pass each for
    finiteness, minima and maxima, whatever the number of columns); only a column that fails is
    walked in Python, to name the row at fault.
    """
    out: dict[str, Sequence[float | None]] = {}
    whole: list[str] = []
    for name in names:
        got = columns.get(name)
        if got is None or not len(got[0]):
            if got is not None and got[1] is not None and len(got[1]):
                raise BatchInvalid(f"{prefix}.{name}", "null_rows given without values")
            out[name] = [None] * rows
            continue
        a, nulls = got
        if len(a) != rows or (nulls is not None and int(nulls.max()) >= rows):
            _name_the_fault(a, nulls, rows, f"{prefix}.{name}", ranges.get(name, (0.0, None)))
        whole.append(name)
        out[name] = ColumnView(a, nulls)
    if whole:
        table = np.stack([columns[name][0] for name in whole])
        low, high = _bounds(prefix, tuple(whole), ranges)
        finite = np.isfinite(table).all(axis=1)
        bad = ~finite | (table.min(axis=1) < low) | (table.max(axis=1) > high)
        for j in np.flatnonzero(bad).tolist():
            name = whole[j]
            a, nulls = columns[name]
            # A placeholder under a null row may be out of range: the slow path forgives it.
            _name_the_fault(a, nulls, rows, f"{prefix}.{name}", ranges.get(name, (0.0, None)))
    return out


_BOUNDS: dict[tuple[str, tuple[str, ...]], tuple[np.ndarray, np.ndarray]] = {}


def _bounds(prefix: str, names: tuple[str, ...], ranges: dict) -> tuple[np.ndarray, np.ndarray]:
    """The lower and upper bounds of ``names``' columns (infinite where open), built once per
    set of reported columns: an agent reports the same columns batch after batch."""
    key = (prefix, names)
    got = _BOUNDS.get(key)
    if got is None:
        pairs = [ranges.get(name, (0.0, None)) for name in names]
        got = (
            np.array([-math.inf if lo is None else lo for lo, _ in pairs]),
            np.array([math.inf if hi is None else hi for _, hi in pairs]),
        )
        if len(_BOUNDS) < 4096:  # sets of columns a sender could vary without end are not all kept
            _BOUNDS[key] = got
    return got


def _name_the_fault(
    a: np.ndarray, nulls: np.ndarray | None, rows: int, field: str, bounds: tuple[float | None, float | None]
) -> None:
    """Raise BatchInvalid naming the row of the column at fault, if any (``check_values``)."""
    try:
        check_values(a.tolist(), [] if nulls is None else nulls.tolist(), rows, field, minimum=bounds[0], maximum=bounds[1])
    except ColumnError as exc:
        raise BatchInvalid(exc.field, str(exc).split(": ", 1)[1]) from None


def _check_processes(
    table: pb.ProcessTable, counts: Sequence[int], rows: int, prefix: str, limits: Limits
) -> None:
    if not counts:
        return
    if len(counts) != rows:
        raise BatchInvalid(f"{prefix}.process_count", f"has {len(counts)} entries for {rows} rows")
    total = sum(counts)
    if len(table.pid) != total or len(table.name) != total:
        raise BatchInvalid(f"{prefix}.processes", f"holds {len(table.pid)} processes, process_count sums to {total}")
    _check_columns(_message_columns(table, PROCESS_COLUMNS), PROCESS_COLUMNS, total, f"{prefix}.processes", {})
    for i, name in enumerate(table.name):
        if len(name) > limits.max_name_chars * 4:
            raise BatchInvalid(f"{prefix}.processes.name[{i}]", f"is {len(name)} characters long")


def _check_text(value: str, field: str, max_chars: int, *, required: bool = False) -> None:
    """An identifier-like text: bounded, and without NUL (which a changed name cannot repair)."""
    if required and not value:
        raise BatchInvalid(field, "is empty")
    if len(value) > max_chars:
        raise BatchInvalid(field, f"is {len(value)} characters, above {max_chars}")
    if NUL in value:
        raise BatchInvalid(field, "contains a NUL character")


def repair_nul(value: str) -> str:
    """A text a user reads (a log line) with each NUL made visible, instead of losing the line."""
    return value.replace(NUL, NUL_REPLACEMENT) if NUL in value else value


def _check_labels(labels: Mapping[str, str], field: str, limits: Limits) -> None:
    if len(labels) > limits.max_labels:
        raise BatchInvalid(field, f"{len(labels)} labels exceed the limit of {limits.max_labels}")
    for key, value in labels.items():
        _check_text(key, f"{field}[{key[:40]!r}]", limits.max_label_key_chars, required=True)
        _check_text(value, f"{field}[{key[:40]!r}]", limits.max_label_value_chars)


def _check_facts(facts: Mapping[str, pb.FactValue], field: str, limits: Limits) -> None:
    if len(facts) > limits.max_facts:
        raise BatchInvalid(field, f"{len(facts)} facts exceed the limit of {limits.max_facts}")
    for key, fv in facts.items():
        name = f"{field}[{key[:40]!r}]"
        _check_text(key, name, limits.max_fact_key_chars, required=True)
        which = fv.WhichOneof("value")
        if which == "real" and not math.isfinite(fv.real):
            raise BatchInvalid(name, f"{fv.real} is not a finite number")
        if which == "text":
            _check_text(fv.text, name, limits.max_message_chars)


def _check_time(value: int, field: str) -> None:
    if not 0 <= value < MAX_TIMESTAMP_NS:
        raise BatchInvalid(field, f"{value} is not a time in nanoseconds since 1970 (0 to 2^62)")


def _check_int64(value: int, field: str) -> None:
    """A uint64 wire field stored in a BIGINT column."""
    if value > INT64_MAX:
        raise BatchInvalid(field, f"{value} does not fit in a signed 64-bit integer")


def check_batch_identity(batch: pb.Batch, limits: Limits) -> None:
    """The checks that must pass before the batch's agent is looked up (its id is a query key)."""
    _check_text(batch.agent_id, "agent_id", limits.max_agent_id_chars, required=True)
    _check_text(batch.boot_id, "boot_id", limits.max_agent_id_chars)
    if batch.seq == 0:
        raise BatchInvalid("seq", "must be 1 or more")
    _check_int64(batch.seq, "seq")
    if batch.sent_ns:
        _check_time(batch.sent_ns, "sent_ns")
    if batch.created_ns:
        _check_time(batch.created_ns, "created_ns")


@dataclass
class Unfolded:
    """A compact-v1 batch's sample sections, unfolded once: ``sections``, the payloads as they
    came (the writer stores them as chunks: ``storage.compact_chunk``), and ``arrays``, the same
    read into arrays (what validation checks and the writer reads its newest rows from)."""

    sections: dict[int, bytes]
    arrays: dict[int, SectionArrays]


def expand_compact(batch: pb.Batch, limits: Limits) -> Unfolded | None:
    """Unfold ``batch.compact`` (compact-v1): its records into the batch's plain fields, in place,
    and its sample sections into arrays (``Unfolded``; the batch's ``host`` and ``gpu`` stay
    empty), for ``validate_batch(unfolded=...)``. A blob that cannot be read is BatchInvalid
    naming where (``compact.gpu.temp_c: is truncated``). None for a plain batch."""
    if not batch.compact:
        return None
    out = Unfolded({}, {})

    def read(number: int, payload: memoryview, budget: _Budget) -> None:
        out.arrays[number] = read_sample_section(number, payload, budget)

    try:
        expand(batch, max_body_bytes=limits.max_compact_body_bytes, max_values=limits.max_compact_values, streams=NUMPY,
               sections=out.sections, sample_reader=read)
    except CompactError as exc:
        raise BatchInvalid(exc.field, str(exc)[len(exc.field) + 2 :]) from None
    return out


def validate_batch(
    batch: pb.Batch, limits: Limits, *, sent_on_rows_clock_ns: int | None = None, unfolded: Unfolded | None = None
) -> Decoded:
    """Raise BatchInvalid for the first broken rule; return the decoded samples.

    ``unfolded``: what ``expand_compact`` gave for this batch (a batch still compact is unfolded
    here). ``sent_on_rows_clock_ns``: the send time read on the clock the rows were stamped with
    (``clocks.place_batch``); rows are checked against it, not against ``sent_ns``, which a
    step of the device's clock after the batch was spooled would put hours away.
    Repairs in place what a user would want kept (NUL characters in log and incident text)."""
    check_batch_identity(batch, limits)
    if batch.compact:
        unfolded = expand_compact(batch, limits)
    arrays = unfolded.arrays if unfolded is not None else {}
    decoded = Decoded()
    sent = sent_on_rows_clock_ns if sent_on_rows_clock_ns is not None else (batch.sent_ns or batch.created_ns)
    host_part, gpu_part = arrays.get(SECTION_HOST), arrays.get(SECTION_GPU)
    if host_part is not None:
        host, host_ts, host_columns = host_part.fields, host_part.ts_ns, host_part.columns
    else:
        host = batch.host
        host_ts = np.array(host.ts_ns, dtype=np.int64)
        host_columns = _message_columns(host, HOST_COLUMNS) if len(host_ts) else {}
    if gpu_part is not None and gpu_part.gpu_index is not None:
        gpu, gpu_ts, gpu_index, gpu_columns = gpu_part.fields, gpu_part.ts_ns, gpu_part.gpu_index, gpu_part.columns
    else:
        gpu = batch.gpu
        gpu_ts, gpu_index = np.array(gpu.ts_ns, dtype=np.int64), np.array(gpu.gpu_index, dtype=np.int64)
        gpu_columns = _message_columns(gpu, GPU_COLUMNS) if len(gpu_ts) else {}
    host_rows, gpu_rows = len(host_ts), len(gpu_ts)
    if host_rows + gpu_rows > limits.max_rows:
        raise BatchInvalid("host/gpu", f"{host_rows + gpu_rows} sample rows exceed the limit of {limits.max_rows}")
    if host_rows:
        _check_ts(host_ts, host_rows, "host.ts_ns", sent, limits)
        decoded.host = _check_columns(host_columns, HOST_COLUMNS, host_rows, "host", _HOST_RANGES)
        if host.core_count:
            if len(host.core_count) != host_rows:
                raise BatchInvalid("host.core_count", f"has {len(host.core_count)} entries for {host_rows} rows")
            cores = sum(host.core_count)
            if len(host.cpu_core_percent) != cores:
                raise BatchInvalid("host.cpu_core_percent", f"has {len(host.cpu_core_percent)} values, core_count sums to {cores}")
            if host.cpu_core_freq_mhz and len(host.cpu_core_freq_mhz) != cores:
                raise BatchInvalid("host.cpu_core_freq_mhz", f"has {len(host.cpu_core_freq_mhz)} values, core_count sums to {cores}")
            # One C-level sum per column: NaN or infinity anywhere makes it non-finite.
            for name in ("cpu_core_percent", "cpu_core_freq_mhz"):
                if not math.isfinite(sum(getattr(host, name))):
                    raise BatchInvalid(f"host.{name}", "holds a value that is not a finite number")
        _check_processes(host.processes, host.process_count, host_rows, "host", limits)
    if gpu_rows:
        _check_ts(gpu_ts, gpu_rows, "gpu.ts_ns", sent, limits)
        if len(gpu_index) != gpu_rows:
            raise BatchInvalid("gpu.gpu_index", f"has {len(gpu_index)} entries for {gpu_rows} rows")
        if int(gpu_index.max()) >= limits.max_gpus:
            raise BatchInvalid("gpu.gpu_index", f"index {int(gpu_index.max())} is not below {limits.max_gpus}")
        decoded.gpu = _check_columns(gpu_columns, GPU_COLUMNS, gpu_rows, "gpu", _GPU_RANGES)
        _check_processes(gpu.processes, gpu.process_count, gpu_rows, "gpu", limits)
    decoded.host_ts, decoded.host_fields = host_ts, host
    decoded.gpu_ts, decoded.gpu_index, decoded.gpu_fields = gpu_ts, gpu_index, gpu
    if len(batch.logs) > limits.max_logs:
        raise BatchInvalid("logs", f"{len(batch.logs)} events exceed the limit of {limits.max_logs}")
    for i, ev in enumerate(batch.logs):
        if len(ev.message) > limits.max_message_chars:
            raise BatchInvalid(f"logs[{i}].message", f"is {len(ev.message)} characters, above {limits.max_message_chars}")
        if len(ev.source) > limits.max_source_chars:
            raise BatchInvalid(f"logs[{i}].source", f"is {len(ev.source)} characters, above {limits.max_source_chars}")
        if NUL in ev.message:
            ev.message = repair_nul(ev.message)
        if NUL in ev.source:
            ev.source = repair_nul(ev.source)
    if batch.logs:
        _check_ts([e.ts_ns for e in batch.logs], len(batch.logs), "logs.ts_ns", sent, limits)
    if len(batch.incidents) > limits.max_incidents:
        raise BatchInvalid("incidents", f"{len(batch.incidents)} incidents exceed the limit of {limits.max_incidents}")
    for i, inc in enumerate(batch.incidents):
        _check_text(inc.kind, f"incidents[{i}].kind", limits.max_kind_chars, required=True)
        for name in ("title", "excerpt"):
            if len(getattr(inc, name)) > limits.max_message_chars:
                raise BatchInvalid(f"incidents[{i}].{name}", f"is {len(getattr(inc, name))} characters, above {limits.max_message_chars}")
        if len(inc.source) > limits.max_source_chars:
            raise BatchInvalid(f"incidents[{i}].source", f"is {len(inc.source)} characters, above {limits.max_source_chars}")
        for name in ("title", "excerpt", "source"):
            if NUL in getattr(inc, name):
                setattr(inc, name, repair_nul(getattr(inc, name)))
        _check_facts(inc.facts, f"incidents[{i}].facts", limits)
    if batch.incidents:
        _check_ts([e.ts_ns for e in batch.incidents], len(batch.incidents), "incidents.ts_ns", sent, limits)
    if len(batch.latency) > limits.max_latency:
        raise BatchInvalid("latency", f"{len(batch.latency)} histograms exceed the limit of {limits.max_latency}")
    for i, h in enumerate(batch.latency):
        _check_text(h.name, f"latency[{i}].name", limits.max_name_chars, required=True)
        if len(h.bucket_index) != len(h.bucket_count):
            raise BatchInvalid(f"latency[{i}].bucket_count", "must pair one-to-one with bucket_index")
        if h.scheme not in LATENCY_SCHEMES:
            raise BatchInvalid(f"latency[{i}].scheme", f"{h.scheme} is no bucket scheme (0 = legacy, 1..{max(LATENCY_SCHEMES)} = OTel scale)")
        if sum(h.bucket_count) + h.zero_count != h.count:
            raise BatchInvalid(f"latency[{i}].count", f"{h.count} differs from the bucket counts' sum")
        for name in ("count", "sum_ns", "errors", "zero_count"):
            _check_int64(getattr(h, name), f"latency[{i}].{name}")
        _check_time(h.start_ns, f"latency[{i}].start_ns")
        _check_time(h.end_ns, f"latency[{i}].end_ns")
        if h.end_ns < h.start_ns:
            raise BatchInvalid(f"latency[{i}].end_ns", "is before start_ns")
        _check_labels(h.labels, f"latency[{i}].labels", limits)
    if len(batch.metrics) > limits.max_metrics:
        raise BatchInvalid("metrics", f"{len(batch.metrics)} points exceed the limit of {limits.max_metrics}")
    for i, m in enumerate(batch.metrics):
        _check_text(m.name, f"metrics[{i}].name", limits.max_name_chars, required=True)
        if not math.isfinite(m.value):
            raise BatchInvalid(f"metrics[{i}].value", f"{m.value} is not a finite number")
        _check_time(m.ts_ns, f"metrics[{i}].ts_ns")
        _check_labels(m.labels, f"metrics[{i}].labels", limits)
    if len(batch.inventory_records) > limits.max_inventory_records:
        raise BatchInvalid(
            "inventory_records", f"{len(batch.inventory_records)} records exceed the limit of {limits.max_inventory_records}"
        )
    for i, r in enumerate(batch.inventory_records):
        _check_text(r.kind, f"inventory_records[{i}].kind", limits.max_kind_chars)
        _check_text(r.name, f"inventory_records[{i}].name", limits.max_name_chars)
        _check_time(r.ts_ns, f"inventory_records[{i}].ts_ns")
        _check_facts(r.facts, f"inventory_records[{i}].facts", limits)
    if batch.HasField("counters"):
        _check_counters(batch.counters, limits)
    decoded.sample_rows = host_rows + gpu_rows
    return decoded


def _check_counters(c: pb.AgentCounters, limits: Limits) -> None:
    for f in c.DESCRIPTOR.fields:
        value = getattr(c, f.name)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise BatchInvalid(f"counters.{f.name}", f"{value} is not a finite number")
        elif isinstance(value, str):
            _check_text(value, f"counters.{f.name}", limits.max_counter_text_chars)


def validate_registration(req: pb.RegisterRequest, limits: Limits) -> None:
    """Raise BatchInvalid (naming the field) for a registration the registry must not store."""
    _check_text(req.agent_id, "agent_id", limits.max_agent_id_chars, required=True)
    _check_text(req.boot_id, "boot_id", limits.max_agent_id_chars)
    _check_text(req.name, "name", limits.max_name_chars)
    _check_text(req.hostname, "hostname", limits.max_hostname_chars)
    _check_text(req.agent_version, "agent_version", limits.max_version_chars)
    if req.sent_ns:
        _check_time(req.sent_ns, "sent_ns")
    _check_labels(req.labels, "labels", limits)
    if len(req.capabilities) > limits.max_capabilities:
        raise BatchInvalid("capabilities", f"{len(req.capabilities)} names exceed the limit of {limits.max_capabilities}")
    for i, cap in enumerate(req.capabilities):
        _check_text(cap, f"capabilities[{i}]", limits.max_version_chars)
    size = req.inventory.ByteSize()
    if size > limits.max_inventory_bytes:
        raise BatchInvalid("inventory", f"is {size} bytes encoded, above {limits.max_inventory_bytes}")
    if len(req.inventory.gpus) > limits.max_gpus:
        raise BatchInvalid("inventory.gpus", f"{len(req.inventory.gpus)} GPUs exceed the limit of {limits.max_gpus}")
    _check_message_text(req.inventory, "inventory", limits)


def _check_message_text(msg: Message, field: str, limits: Limits) -> None:
    """NUL and integer range in every field of a (small, already size-bounded) message."""
    for f in msg.DESCRIPTOR.fields:
        value = getattr(msg, f.name)
        name = f"{field}.{f.name}"
        if f.message_type is not None:
            items = value if f.is_repeated else [value]
            for j, sub in enumerate(items):
                _check_message_text(sub, f"{name}[{j}]" if f.is_repeated else name, limits)
        elif isinstance(value, str):
            _check_text(value, name, limits.max_message_chars)
        elif isinstance(value, int) and not isinstance(value, bool):
            _check_int64(value, name)
