"""Test helpers: deterministic samplers and database counts."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from sqlalchemy import create_engine, func, inspect, select, text

from fleetscope.agent.daemon.runner import Agent, AgentSettings
from fleetscope.agent.records import GpuSample, HostSample, IncidentRecord
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.collector.storage.engine import normalise_url
from fleetscope.proto.v1 import telemetry_pb2 as pb


class IdleSampler:
    """A sampler that produces nothing: the test adds its records to the agent itself."""

    name = "idle"

    def inventory(self) -> list:
        return []

    def sample(self, now_ns: int) -> SampleSet:
        return SampleSet()

    def close(self) -> None:
        pass


class CountingSampler:
    """Emits ``per_tick`` GPU rows per sample, each with a unique sequence number in ``energy_j``,
    until ``total`` rows were produced. Lets a test check "every sample exactly once"."""

    name = "counting"

    def __init__(self, total: int, per_tick: int = 100, *, incidents_every: int = 0, bad_temp_at_tick: int | None = None,
                 incompressible: bool = False, hold_at: int | None = None) -> None:
        self.total, self.per_tick = total, per_tick
        # Production pauses at ``hold_at`` rows until ``release()``: a test that injects a fault
        # mid-stream needs rows still to come however slowly the machine ran up to the fault.
        self.hold_at = hold_at
        self.released = threading.Event()
        # Random 40-bit readings in four columns: about 20 bytes a row however well batches
        # compress (compact-v1), for the tests that must fill a spool bound.
        self._noise = random.Random(7) if incompressible else None
        self.produced = 0
        self.ticks = 0
        self.incidents_every = incidents_every
        self.bad_temp_at_tick = bad_temp_at_tick
        self.incidents = 0
        self.lock = threading.Lock()

    def inventory(self) -> list:
        return []

    def sample(self, now_ns: int) -> SampleSet:
        with self.lock:
            limit = self.total if self.hold_at is None or self.released.is_set() else min(self.total, self.hold_at)
            n = max(0, min(self.per_tick, limit - self.produced))
            rows = []
            for i in range(n):
                k = self.produced + i
                bad = self.bad_temp_at_tick is not None and self.ticks == self.bad_temp_at_tick and i == 0
                noise = {} if self._noise is None else {
                    name: float(self._noise.getrandbits(40))
                    for name in ("memory_used_bytes", "memory_free_bytes", "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s")}
                rows.append(GpuSample(ts_ns=now_ns + i, gpu_index=k % 8, energy_j=float(k), util_gpu_percent=50.0,
                                      temp_c=-500.0 if bad else 60.0, **noise))
            self.produced += n
            self.ticks += 1
            out = SampleSet(gpu=rows, host=[HostSample(ts_ns=now_ns, cpu_percent=10.0)] if n else [])
            if self.incidents_every and self.ticks % self.incidents_every == 0:
                self.incidents += 1
                out.incidents.append(IncidentRecord(ts_ns=now_ns, kind="cuda_oom", severity="error",
                                                    title=f"test incident {self.incidents}", facts={"n": self.incidents}))
            return out

    def release(self) -> None:
        """Let production go on past ``hold_at``."""
        self.released.set()

    def done(self) -> bool:
        return self.produced >= self.total

    def close(self) -> None:
        pass


def make_agent(tmp_path: Path, collectors: list[str], sampler, *, name: str = "dev-1", token: str = "test-token",
               interval_s: float = 0.05, clock=time.time_ns, classify=None, **overrides) -> Agent:  # type: ignore[no-untyped-def]
    settings = AgentSettings(
        collectors=tuple(collectors), spool_dir=tmp_path / f"spool-{name}", token=token, name=name,
        labels={"site": "test"}, interval_s=interval_s, batch_interval_s=overrides.pop("batch_interval_s", 0.1),
        backoff_initial_s=0.1, backoff_max_s=overrides.pop("backoff_max_s", 1.0), drain_timeout_s=overrides.pop("drain_timeout_s", 10.0),
        **overrides,
    )
    return Agent(settings, samplers=[sampler], inventory=pb.Inventory(cpu_model="test"), kind=pb.DEVICE_KIND_SERVER,
                 clock=clock, classify=classify)


def gpu_sequence_numbers(db_url: str, device: str = "dev-1") -> list[int]:
    """The `energy_j` sequence numbers stored for a device, in insertion order: tail rows (an
    older collector's) first, then the chunks' rows, chunk by chunk as they were inserted."""
    from fleetscope.collector.storage.chunk_codec import decode_chunk

    engine = create_engine(normalise_url(db_url))
    order = " ORDER BY {}.rowid" if engine.dialect.name == "sqlite" else " ORDER BY {}.ctid"
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT g.energy_j FROM gpu_samples g JOIN devices d ON d.id = g.device_id WHERE d.name = :n"
                     + order.format("g")),
                {"n": device},
            ).all()
            chunks = conn.execute(
                text("SELECT c.data FROM gpu_chunks c JOIN devices d ON d.id = c.device_id WHERE d.name = :n"
                     + order.format("c")),
                {"n": device},
            ).all() if inspect(conn).has_table("gpu_chunks") else []  # a database from before revision 0006
        out = [int(r[0]) for r in rows]
        for (data,) in chunks:
            _ts, values, _texts = decode_chunk(bytes(data))
            out.extend(int(v) for v in values["energy_j"].tolist() if v == v)
        return out
    finally:
        engine.dispose()


def table_count(db_url: str, table: str) -> int:
    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(text(table))).scalar_one())
    finally:
        engine.dispose()


def stored_samples(db_url: str, kind: str = "gpu", *, device: str | None = None, lo: int = 0, hi: int = 2**63 - 1,
                   columns: tuple[str, ...] | None = None):  # type: ignore[no-untyped-def]
    """The raw samples stored (``kind`` "gpu" or "host"), wherever they sit: chunks (what the
    collector writes) and tail rows (what older collectors wrote), as ``chunk_reader.ChunkRows``
    sorted by time; of one device (by name) or all, with ``lo <= ts_ns < hi``."""
    from fleetscope.collector.storage.chunk_reader import read_samples

    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            if device is None:
                ids = [int(r[0]) for r in conn.execute(text("SELECT id FROM devices")).all()]
            else:
                ids = [int(r[0]) for r in conn.execute(text("SELECT id FROM devices WHERE name = :n"), {"n": device}).all()]
            return read_samples(conn, kind, ids, lo, hi, columns=columns)
    finally:
        engine.dispose()


def sample_count(db_url: str, kind: str = "gpu", **where) -> int:  # type: ignore[no-untyped-def]
    """How many raw samples are stored (see ``stored_samples``)."""
    return len(stored_samples(db_url, kind, columns=(), **where))
