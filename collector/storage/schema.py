"""The collector's tables.

Entities (devices, incidents) are typed ORM models; the time series are Core tables with no
per-row key, because they are only ever bulk-inserted and range-scanned: an identity column
would cost a sequence step per row and buys nothing. Exactly-once is enforced per batch by
``ingested_batches`` (one row per agent id, boot id and sequence), not by a unique index per
sample row.

GPU readings are split by how often they change. ``gpu_samples`` holds what moves every
second (utilisation, memory used, temperature, power, clocks, throttle reasons);
``gpu_state`` holds what changes rarely (memory and BAR1 totals, power limit, maximum clocks,
PCIe link, ECC and page-retirement counters) and gets a row only when a value changed. A row's
cost in SQLite grows with its column count, so this keeps ingest near the driver's ceiling.
Free GPU memory is ``memory_total_bytes - memory_used_bytes`` at query time.

Times are int64 nanoseconds since the epoch on the collector's time base: the device's clock
plus the stream's estimated skew when that skew is larger than the tolerance (see ingest).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    metadata = MetaData()


metadata = Base.metadata


class Device(Base):
    __tablename__ = "devices"
    # Server-side defaults are not read back after an INSERT (no RETURNING of them): the
    # registry never needs them, and the deferred columns below stay out of its statements.
    __mapper_args__ = {"eager_defaults": False}

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    agent_id: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    hostname: Mapped[str] = mapped_column(String(255), default="")
    kind: Mapped[str] = mapped_column(String(16), default="other")
    boot_id: Mapped[str] = mapped_column(String(64), default="")
    agent_version: Mapped[str] = mapped_column(String(64), default="")
    labels: Mapped[dict] = mapped_column(JSON, default=dict)
    inventory: Mapped[dict] = mapped_column(JSON, default=dict)
    capabilities: Mapped[list] = mapped_column(JSON, default=list)
    first_seen_ns: Mapped[int] = mapped_column(BigInteger)
    last_seen_ns: Mapped[int] = mapped_column(BigInteger)
    clock_skew_ns: Mapped[int] = mapped_column(BigInteger, default=0)
    counters: Mapped[dict] = mapped_column(JSON, default=dict)
    batches_stored: Mapped[int] = mapped_column(BigInteger, default=0)
    batches_rejected: Mapped[int] = mapped_column(BigInteger, default=0)
    last_rejection: Mapped[str] = mapped_column(Text, default="")
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)
    # Batches whose rows were placed by the device's monotonic clock because its wall clock had
    # stepped since they were spooled (revision 0003), and the last such step (rows clock minus
    # send-time clock): a drone whose clock jumps at boot shows here, not only in a log line.
    # Deferred, with no Python default: the registry's ORM reads and inserts leave them out (the
    # writer's statements update them); readers undefer them.
    batches_reanchored: Mapped[int] = mapped_column(BigInteger, server_default="0", deferred=True, deferred_group="clock_steps")
    last_clock_step_ns: Mapped[int] = mapped_column(BigInteger, server_default="0", deferred=True, deferred_group="clock_steps")  # 0: none


class Incident(Base):
    __tablename__ = "incidents"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"), index=True)
    ts_ns: Mapped[int] = mapped_column(BigInteger)
    received_ns: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16))
    title: Mapped[str] = mapped_column(Text)
    facts: Mapped[dict] = mapped_column(JSON, default=dict)
    source: Mapped[str] = mapped_column(Text, default="")
    excerpt: Mapped[str] = mapped_column(Text, default="")
    context: Mapped[dict] = mapped_column(JSON, default=dict)
    # The lifecycle (revision 0003). ``ts_ns`` is when it started; repeats of the same kind on the
    # same device and GPU (and ``group_key``) within the grouping window raise ``count`` and
    # ``last_seen_ns`` instead of adding rows. ``ended_ns`` is set when it is resolved.
    gpu_index: Mapped[int | None] = mapped_column(SmallInteger, nullable=True, default=None)
    pid: Mapped[int | None] = mapped_column(BigInteger, nullable=True, default=None)
    process_name: Mapped[str] = mapped_column(String(255), default="", server_default="")
    group_key: Mapped[str] = mapped_column(String(200), default="", server_default="")  # e.g. "xid:79", an operation's name
    state: Mapped[str] = mapped_column(String(16), default="open", server_default="open")  # vocabulary.INCIDENT_STATES
    origin: Mapped[str] = mapped_column(String(16), default="agent", server_default="agent")  # vocabulary.INCIDENT_ORIGINS
    count: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    last_seen_ns: Mapped[int] = mapped_column(BigInteger)
    ended_ns: Mapped[int | None] = mapped_column(BigInteger, nullable=True, default=None)
    updated_ns: Mapped[int] = mapped_column(BigInteger)  # collector time of the last change
    hints: Mapped[list] = mapped_column(JSON, default=list)  # [{"text": ..., "facts": {...}}], computed from data

    __table_args__ = (
        Index("incidents_kind_ts", "kind", "ts_ns"),
        Index("incidents_ts", "ts_ns"),
        Index("incidents_open", "state", "device_id", "kind"),
    )


ingested_batches = Table(
    "ingested_batches",
    metadata,
    Column("agent_id", String(64), primary_key=True),
    Column("boot_id", String(64), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("received_ns", BigInteger, nullable=False),
    Column("rows", Integer, nullable=False),
    # The device the batch was stored for (revision 0010; NULL for claims made before it): on
    # Citus the claim lives beside the batch's rows (``storage.citus``).
    Column("device_id", Integer, nullable=True),
    # Retention prunes the claims older than the raw tier by this (revision 0008).
    Index("ingested_batches_received", "received_ns"),
)

streams = Table(
    "streams",
    metadata,
    Column("agent_id", String(64), primary_key=True),
    Column("boot_id", String(64), primary_key=True),
    Column("device_id", Integer, ForeignKey("devices.id"), nullable=False),
    Column("clock_skew_ns", BigInteger, nullable=False),
    Column("correction_ns", BigInteger, nullable=False),
    Column("first_seen_ns", BigInteger, nullable=False),
    Column("last_seen_ns", BigInteger, nullable=False),
)

HOST_VALUE_COLUMNS = (
    "cpu_percent",
    "load1",
    "load5",
    "load15",
    "mem_total_bytes",
    "mem_used_bytes",
    "mem_available_bytes",
    "swap_total_bytes",
    "swap_used_bytes",
    "disk_total_bytes",
    "disk_used_bytes",
    "disk_read_bytes",
    "disk_write_bytes",
    "net_rx_bytes",
    "net_tx_bytes",
)

host_samples = Table(
    "host_samples",
    metadata,
    Column("device_id", Integer, nullable=False),
    Column("ts_ns", BigInteger, nullable=False),
    *[Column(name, Float) for name in HOST_VALUE_COLUMNS],
    Column("cpu_cores", Text),  # JSON: [[percent, mhz|null], ...]
    Column("top_processes", Text),  # JSON: [{pid, name, cpu_percent, rss_bytes}, ...]
    Index("host_samples_device_ts", "device_id", "ts_ns"),
)

GPU_SAMPLE_COLUMNS = (
    "util_gpu_percent",
    "util_memory_percent",
    "util_encoder_percent",
    "util_decoder_percent",
    "memory_used_bytes",
    "temp_c",
    "memory_temp_c",
    "power_w",
    "energy_j",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "graphics_clock_mhz",
    "pstate",
    "fan_percent",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
    "throttle_reasons",
)

gpu_samples = Table(
    "gpu_samples",
    metadata,
    Column("device_id", Integer, nullable=False),
    Column("ts_ns", BigInteger, nullable=False),
    Column("gpu_index", SmallInteger, nullable=False),
    *[Column(name, Float) for name in GPU_SAMPLE_COLUMNS],
    Index("gpu_samples_device_ts", "device_id", "ts_ns"),
)

# Compacted raw samples (revision 0006): the compaction job (``fleetscope.collector.jobs.compaction``)
# folds tail rows of ``gpu_samples`` / ``host_samples`` older than its fold boundary into one row
# per device (and GPU) and time range, normally up to an hour, all columns encoded together by
# ``storage.chunk_codec`` (about 1-2 bytes a value against about 10 in the tail). ``end_ns`` is the
# time of the chunk's last row (inclusive). Chunks of one device may overlap (late rows folded
# after their hour was): readers merge them (``storage.chunk_reader``).
gpu_chunks = Table(
    "gpu_chunks",
    metadata,
    Column("device_id", Integer, nullable=False),
    Column("gpu_index", SmallInteger, nullable=False),
    Column("start_ns", BigInteger, nullable=False),
    Column("end_ns", BigInteger, nullable=False),
    Column("rows", Integer, nullable=False),
    Column("codec", SmallInteger, nullable=False),  # chunk_codec.CODEC_VERSION of ``data``
    Column("data", LargeBinary, nullable=False),
    Index("gpu_chunks_device_start", "device_id", "gpu_index", "start_ns"),
    Index("gpu_chunks_start", "start_ns"),
)

host_chunks = Table(
    "host_chunks",
    metadata,
    Column("device_id", Integer, nullable=False),
    Column("start_ns", BigInteger, nullable=False),
    Column("end_ns", BigInteger, nullable=False),
    Column("rows", Integer, nullable=False),
    Column("codec", SmallInteger, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Index("host_chunks_device_start", "device_id", "start_ns"),
    Index("host_chunks_start", "start_ns"),
)

# The newest reading of each device (``host_latest``) and GPU (``gpu_latest``), revision 0011.
# Samples are stored as chunks as they arrive (a batch's columns, not a row per sample), so "what
# is it reading now" (the Fleet page, ``/metrics/fleet``, alert rules, a detector's latest value)
# would otherwise decode the newest chunk of every device. The writer upserts the newest row of
# each batch here in the batch's transaction, and only over an older row: a replayed backlog
# never hides what is newer.
gpu_latest = Table(
    "gpu_latest",
    metadata,
    Column("device_id", Integer, primary_key=True),
    Column("gpu_index", SmallInteger, primary_key=True),
    Column("ts_ns", BigInteger, nullable=False),
    *[Column(name, Float) for name in GPU_SAMPLE_COLUMNS],
)

host_latest = Table(
    "host_latest",
    metadata,
    Column("device_id", Integer, primary_key=True),
    Column("ts_ns", BigInteger, nullable=False),
    *[Column(name, Float) for name in HOST_VALUE_COLUMNS],
    Column("cpu_cores", Text),
    Column("top_processes", Text),
)

GPU_STATE_COLUMNS = (
    "memory_total_bytes",
    "bar1_used_bytes",
    "bar1_total_bytes",
    "power_limit_w",
    "sm_clock_max_mhz",
    "memory_clock_max_mhz",
    "pcie_gen",
    "pcie_width",
    "ecc_volatile_corrected",
    "ecc_volatile_uncorrected",
    "ecc_aggregate_corrected",
    "ecc_aggregate_uncorrected",
    "retired_pages",
    "remapped_rows",
)

gpu_state = Table(
    "gpu_state",
    metadata,
    Column("device_id", Integer, nullable=False),
    Column("ts_ns", BigInteger, nullable=False),
    Column("gpu_index", SmallInteger, nullable=False),
    *[Column(name, Float) for name in GPU_STATE_COLUMNS],
    Column("processes", Text),  # JSON: the compute processes at ts_ns
    Index("gpu_state_device_ts", "device_id", "gpu_index", "ts_ns"),
)

latency_histograms = Table(
    "latency_histograms",
    metadata,
    Column("device_id", Integer, nullable=False),
    Column("start_ns", BigInteger, nullable=False),
    Column("end_ns", BigInteger, nullable=False),
    Column("name", String(200), nullable=False),
    Column("labels", Text, nullable=False),  # canonical JSON (sorted keys), so equal labels compare equal
    Column("count", BigInteger, nullable=False),
    Column("sum_ns", BigInteger, nullable=False),
    Column("errors", BigInteger, nullable=False),
    Column("zero_count", BigInteger, nullable=False),
    Column("buckets", Text, nullable=False),  # JSON {index: count}
    # What the indexes mean (fleetscope.proto.exponential): 0 = legacy base 1.04, 1..8 = OTel scale.
    Column("scheme", SmallInteger, nullable=False, server_default="0"),
    Index("latency_device_name_ts", "device_id", "name", "start_ns"),
)

metric_points = Table(
    "metric_points",
    metadata,
    Column("device_id", Integer, nullable=False),
    Column("ts_ns", BigInteger, nullable=False),
    Column("name", String(200), nullable=False),
    Column("value", Float, nullable=False),
    Column("labels", Text, nullable=False),
    Index("metric_points_device_name_ts", "device_id", "name", "ts_ns"),
)

inventory_records = Table(
    "inventory_records",
    metadata,
    Column("device_id", Integer, nullable=False),
    Column("ts_ns", BigInteger, nullable=False),
    Column("kind", String(64), nullable=False),
    Column("name", String(200), nullable=False),
    Column("facts", Text, nullable=False),
    Index("inventory_records_device_kind", "device_id", "kind", "ts_ns"),
)

log_events = Table(
    "log_events",
    metadata,
    Column("device_id", Integer, nullable=False),
    Column("ts_ns", BigInteger, nullable=False),
    Column("source", Text, nullable=False),
    Column("level", String(16), nullable=False),
    Column("message", Text, nullable=False),
    Index("log_events_device_ts", "device_id", "ts_ns"),
)

# A named lease per once-per-fleet job (the rollup job, detectors): any number of collectors
# run the job, only the lease's holder does the work. See ``fleetscope.collector.storage.lease``.
leases = Table(
    "leases",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("owner", String(128), nullable=False),
    Column("expires_ns", BigInteger, nullable=False),
)

# ---------------------------------------------------------------------- detectors and alerts
# (revision 0003; see fleetscope.collector.jobs.detectors and fleetscope.collector.alerting)

# Where each detector has read up to, per device and key (an operation, a GPU), and the small
# state it carries between passes (a baseline, since when a condition holds). Moved in the same
# transaction as the incidents the pass wrote, so a crash never detects twice.
detector_progress = Table(
    "detector_progress",
    metadata,
    Column("detector", String(64), primary_key=True),
    Column("device_id", Integer, primary_key=True, autoincrement=False),
    Column("key", String(200), primary_key=True),
    Column("until_ns", BigInteger, nullable=False),
    Column("state", JSON, nullable=False),
)

# One row per alert instance: a rule matched for one subject (a device, an incident, a device's
# GPU, an operation), identified by ``fingerprint``. Resolved rows stay as the history.
alerts = Table(
    "alerts",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("rule", String(200), nullable=False),
    Column("fingerprint", String(64), nullable=False),  # stable hash of rule + subject
    Column("state", String(16), nullable=False),  # vocabulary.ALERT_STATES
    Column("device_id", Integer, nullable=True),
    Column("incident_id", BigInteger, nullable=True),
    Column("kind", String(64), nullable=False),  # the incident kind, or "metric", "absent", "slo"
    Column("severity", String(16), nullable=False),
    Column("summary", Text, nullable=False),
    Column("labels", JSON, nullable=False),  # the device's labels plus the rule's subject labels
    Column("facts", JSON, nullable=False),
    Column("pending_ns", BigInteger, nullable=False),  # the condition first held
    Column("firing_ns", BigInteger, nullable=True),
    Column("resolved_ns", BigInteger, nullable=True),
    Column("last_eval_ns", BigInteger, nullable=False),
    Column("silenced_by", BigInteger, nullable=True),  # the silence that held it at its last transition
    Index("alerts_state", "state", "rule"),
    Index("alerts_fingerprint", "fingerprint", "state"),
    Index("alerts_device", "device_id", "pending_ns"),
)

# One row per notification owed: an alert's transition (firing, resolved) to one notifier. The
# unique key is what makes "never two for one transition" hold with several collectors.
notifications = Table(
    "notifications",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("alert_id", BigInteger, nullable=False),
    Column("transition", String(16), nullable=False),  # firing | resolved
    Column("notifier", String(200), nullable=False),
    Column("payload", JSON, nullable=False),
    Column("state", String(16), nullable=False),  # pending | delivered | failed (gave up)
    Column("attempts", Integer, nullable=False),
    Column("created_ns", BigInteger, nullable=False),
    Column("next_attempt_ns", BigInteger, nullable=False),
    Column("delivered_ns", BigInteger, nullable=True),
    Column("last_error", Text, nullable=False),
    UniqueConstraint("alert_id", "transition", "notifier", name="notifications_once"),
    Index("notifications_due", "state", "next_attempt_ns"),
)

# Every delivery attempt, kept for the Alerts page and `fleetscope alerts --json`.
notification_attempts = Table(
    "notification_attempts",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("notification_id", BigInteger, nullable=False, index=True),
    Column("ts_ns", BigInteger, nullable=False),
    Column("ok", Boolean, nullable=False),
    Column("status", Integer, nullable=True),  # the HTTP status, None when no answer came
    Column("error", Text, nullable=False),
    Column("duration_ms", Float, nullable=False),
)

# Silences: while one matches (rule and/or device and/or labels) and has not expired, its alerts
# still change state and are recorded, but notify no one.
silences = Table(
    "silences",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("rule", String(200), nullable=True),  # None: any rule
    Column("device", String(200), nullable=True),  # a device name; None: any device
    Column("labels", JSON, nullable=False),  # {key: value} that must all match; {} matches all
    Column("created_ns", BigInteger, nullable=False),
    Column("expires_ns", BigInteger, nullable=False),
    Column("created_by", String(200), nullable=False),
    Column("comment", Text, nullable=False),
    Index("silences_expires", "expires_ns"),
)

# Enrolment tokens (revision 0004): ``fleetscope token create --fleet NAME`` makes one; an agent
# presenting it on first contact is enrolled into that fleet. Only the SHA-256 of the secret is kept.
enrolment_tokens = Table(
    "enrolment_tokens",
    metadata,
    Column("id", String(32), primary_key=True),  # the token's public part: "fse1.<id>.<secret>"
    Column("fleet", String(200), nullable=False),
    Column("secret_sha256", String(64), nullable=False),
    Column("created_ns", BigInteger, nullable=False),
    Column("expires_ns", BigInteger, nullable=True),  # None: never
    Column("revoked_ns", BigInteger, nullable=True),
    Column("uses", Integer, nullable=False),  # devices enrolled with it
    Column("last_used_ns", BigInteger, nullable=True),
    Column("comment", Text, nullable=False),
    # Revision 0009: the most devices it may enrol, and enrolments per minute (None: no limit).
    Column("max_devices", Integer, nullable=True),
    Column("max_enrolments_per_min", Integer, nullable=True),
)

# One row per agent id that has an identity (revision 0004): the SHA-256 of the device key it
# enrolled with, and the fleet. An agent id with a row can only be used with its key; a revoked
# row (``revoked_ns``) refuses the id for good. ``via``: "token:<id>" (an enrolment token),
# "static" (a collector's --token), "open" (a collector without tokens), "revoked" (revoked
# before it ever enrolled).
device_credentials = Table(
    "device_credentials",
    metadata,
    Column("agent_id", String(64), primary_key=True),
    Column("key_sha256", String(64), nullable=False),  # "" for a row made by a revocation
    Column("fleet", String(200), nullable=False),
    Column("via", String(64), nullable=False),
    Column("created_ns", BigInteger, nullable=False),
    Column("revoked_ns", BigInteger, nullable=True),
    Index("device_credentials_revoked", "revoked_ns"),
    Index("device_credentials_via_created", "via", "created_ns"),  # a token's enrolments in the last minute (0009)
)

# One row per revocation (revision 0009), numbered by the database: collectors notice a new row by
# the count of rows, not by anyone's clock, and close the revoked agents' streams. The device's
# name and hardware ids (GPU UUIDs and serials) are kept so that the same device cannot enrol
# again under a new agent id until an operator allows it (``allowed_ns``,
# ``fleetscope device allow``). ``revoked_ns`` is the revoking host's clock: shown, never compared.
device_revocations = Table(
    "device_revocations",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("agent_id", String(64), nullable=False),
    Column("fleet", String(200), nullable=False),
    Column("name", String(200), nullable=False),
    Column("hardware_ids", Text, nullable=False),  # space-separated GPU UUIDs and serials
    Column("revoked_ns", BigInteger, nullable=False),
    Column("allowed_ns", BigInteger, nullable=True),
    Index("device_revocations_name", "name"),
)

# The schema's revision is Alembic's ``alembic_version`` (see ``storage.migrations``). This
# table's ``schema_version`` row is what collectors from before migrations check: they refuse
# a database whose number is above their 1, so migrations set it to 2 and an old collector
# cannot start on a database whose tables it no longer knows.
schema_info = Table(
    "schema_info",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", String(200), nullable=False),
)

# ---------------------------------------------------------------------- retention (revision 0007)

# The samples around each incident, copied here by the retention job (``jobs.retention``) before
# the raw tier drops them, so that an incident's page keeps its context for as long as the
# incident itself is kept. Same columns as the sample tables; never partitioned.
incident_host_samples = Table(
    "incident_host_samples",
    metadata,
    *[Column(c.name, c.type, nullable=c.nullable) for c in host_samples.columns],
    Index("incident_host_samples_device_ts", "device_id", "ts_ns"),
)
incident_gpu_samples = Table(
    "incident_gpu_samples",
    metadata,
    *[Column(c.name, c.type, nullable=c.nullable) for c in gpu_samples.columns],
    Index("incident_gpu_samples_device_ts", "device_id", "ts_ns"),
)


def declare_partitioning() -> None:
    """PostgreSQL: each table of ``partitions.PARTITIONED`` in this metadata is a parent
    partitioned by range of its time key, with a default partition (see ``storage.partitions``;
    revision 0007 does the same to an existing database). Called again when a module adds a
    partitioned table to the metadata later; SQLite ignores both."""
    from sqlalchemy import DDL, event

    from fleetscope.collector.storage.partitions import PARTITIONED, default_partition_name

    for name, key in PARTITIONED.items():
        table = metadata.tables.get(name)
        if table is None or table.dialect_options["postgresql"]["partition_by"]:
            continue
        table.dialect_kwargs["postgresql_partition_by"] = f"RANGE ({key})"
        ddl = DDL(f"CREATE TABLE {default_partition_name(name)} PARTITION OF {name} DEFAULT")
        event.listen(table, "after_create", ddl.execute_if(dialect="postgresql"))


declare_partitioning()
