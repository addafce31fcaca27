"""Incidents as a lifecycle: repeats grouped into one incident with a count, the queries' filters,
and the ``incidents`` / ``incident ID`` commands, on SQLite and PostgreSQL.

The incidents go in through the real pipeline (an agent's records, its spool and uplink, a
collector over gRPC, the group-commit writer); the Xid ones come from the Xid classifier reading
recorded driver lines and from the NVML sampler's event thread over the fake NVML, as in
``test_xid_merge``. Each ``send`` is one flush, one batch: repeats arrive in later transactions
than the incident they join.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from fleetscope.agent.daemon.runner import Agent
from fleetscope.agent.records import GpuSample, HostSample, IncidentRecord, LogEvent
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.cli import main as fleetscope
from fleetscope.collector.ingest.scan_import import ImportedIncident, import_incidents
from fleetscope.collector.query import (
    IncidentView,
    UnknownIncidentKind,
    incident_with_context,
    search_incidents,
)
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.schema import Incident
from fleetscope.proto.vocabulary import INCIDENT_KINDS
from tests.collector.test_xid_merge import NvmlReporter, kernel_report, line_xid31_bus01
from tests.helpers import IdleSampler, make_agent

S = 10**9
MIN = 60 * S
GIB = 1 << 30


class Device:
    """A real agent sending to the test's collector: one batch per ``send``, acknowledged."""

    def __init__(self, tmp_path: Path, port: int, name: str) -> None:
        self.agent: Agent = make_agent(tmp_path, [f"127.0.0.1:{port}"], IdleSampler(), name=name)
        self.agent.uplink.start()

    def send(self, *incidents: IncidentRecord, **records: Any) -> None:
        self.agent.add(SampleSet(incidents=list(incidents), **records))
        self.agent.flush()
        assert self.agent.uplink.drain(30), "batch not acknowledged"

    def close(self) -> None:
        self.agent.uplink.stop()
        self.agent.spool.close()


@pytest.fixture
def collector(db_url: str) -> Iterator[Any]:
    """An in-process collector without detectors: the incidents here are an hour old, and the
    lifecycle job would resolve them (quiet period) between two sends; this is about grouping."""
    from fleetscope.collector.ingest.server import Collector, CollectorSettings

    c = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=db_url, tokens=frozenset(["test-token"]), grace_s=2.0,
                                    detectors=None))  # fmt: skip
    c.start()
    yield c
    c.stop()


@pytest.fixture
def engine(db_url: str):  # type: ignore[no-untyped-def]
    e = make_engine(db_url)
    yield e
    e.dispose()


@pytest.fixture
def device(tmp_path: Path, collector, engine) -> Iterator[Device]:  # type: ignore[no-untyped-def]
    d = Device(tmp_path, collector.port, "gpu-node-1")
    yield d
    d.close()


def oom(ts: int, gpu: int = 0, n: int = 0, **facts: Any) -> IncidentRecord:
    return IncidentRecord(
        ts_ns=ts, kind="cuda_oom", severity="error", title=f"CUDA OOM on cuda:{gpu} #{n}",
        facts={"device_index": gpu, "n": n, **facts}, source="/var/log/train.log",
        excerpt="torch.OutOfMemoryError: CUDA out of memory.",
    )  # fmt: skip


def incidents(engine, **filters: Any) -> list[IncidentView]:  # type: ignore[no-untyped-def]
    with Session(engine) as s:
        return sorted(search_incidents(session=s, since_ns=0, until_ns=2**62, **filters), key=lambda i: i.ts_ns)


T0 = (time.time_ns() - 3600 * S) // S * S  # an hour ago


# ------------------------------------------------------------------------------ grouping


def test_repeats_within_the_window_are_one_incident_with_a_count(engine, device) -> None:  # type: ignore[no-untyped-def]
    device.send(oom(T0, n=1, pid=4242, process_name="train.py"))
    device.send(oom(T0 + 1 * MIN, n=2), oom(T0 + 2 * MIN, n=3))
    device.send(oom(T0 + 6 * MIN, n=4, pid=5151))  # 4 min after the last one: still the same incident
    (inc,) = incidents(engine)
    assert (inc.count, inc.state, inc.origin, inc.ts_ns, inc.last_seen_ns) == (4, "open", "agent", T0, T0 + 6 * MIN)
    assert inc.ended_ns is None and inc.updated_ns >= inc.ts_ns
    # The first occurrence's facts and title stay the incident's; the latest's are kept beside them.
    assert inc.title == "CUDA OOM on cuda:0 #1" and inc.facts["n"] == 1
    assert inc.facts["last"]["n"] == 4 and inc.facts["last"]["ts_ns"] == T0 + 6 * MIN
    assert inc.facts["last"]["title"] == "CUDA OOM on cuda:0 #4"
    assert (inc.gpu_index, inc.pid, inc.process_name, inc.group_key) == (0, 4242, "train.py", "")


def test_a_repeat_after_the_window_opens_a_new_incident(engine, device) -> None:  # type: ignore[no-untyped-def]
    device.send(oom(T0, n=1))
    device.send(oom(T0 + 5 * MIN + S, n=2))
    assert [(i.count, i.facts["n"]) for i in incidents(engine)] == [(1, 1), (1, 2)]


def test_a_resolved_incident_does_not_absorb_repeats(engine, device) -> None:  # type: ignore[no-untyped-def]
    device.send(oom(T0, n=1))
    with Session(engine) as s, s.begin():  # what the lifecycle job does after the quiet period
        s.execute(update(Incident).values(state="resolved", ended_ns=T0 + S))
    device.send(oom(T0 + MIN, n=2))
    got = incidents(engine)
    assert [(i.state, i.count, i.facts["n"]) for i in got] == [("resolved", 1, 1), ("open", 1, 2)]
    # ...and the new one absorbs the next repeat.
    device.send(oom(T0 + 2 * MIN, n=3))
    assert [(i.state, i.count) for i in incidents(engine)] == [("resolved", 1), ("open", 2)]


def test_two_gpus_are_two_incidents(engine, device) -> None:  # type: ignore[no-untyped-def]
    device.send(oom(T0, gpu=0), oom(T0 + S, gpu=1))
    device.send(oom(T0 + MIN, gpu=1), oom(T0 + MIN, gpu=0), oom(T0 + 2 * MIN, gpu=1))
    assert sorted((i.gpu_index, i.count) for i in incidents(engine)) == [(0, 2), (1, 3)]


def test_two_kinds_and_two_devices_are_apart(engine, device, tmp_path: Path, collector) -> None:  # type: ignore[no-untyped-def]
    host_oom = IncidentRecord(ts_ns=T0 + S, kind="host_oom", severity="error", title="OOM killer: python",
                              facts={"victim_pid": 77, "victim_process": "python"})  # fmt: skip
    device.send(oom(T0), host_oom)
    other = Device(tmp_path, collector.port, "gpu-node-2")
    try:
        other.send(oom(T0 + MIN))
    finally:
        other.close()
    got = incidents(engine)
    assert sorted((i.device, i.kind, i.count) for i in got) == [
        ("gpu-node-1", "cuda_oom", 1), ("gpu-node-1", "host_oom", 1), ("gpu-node-2", "cuda_oom", 1),
    ]  # fmt: skip
    (killed,) = [i for i in got if i.kind == "host_oom"]
    assert (killed.pid, killed.process_name, killed.gpu_index) == (77, "python", None)


def test_records_are_never_grouped_and_never_open(engine, device) -> None:  # type: ignore[no-untyped-def]
    bench = [IncidentRecord(ts_ns=T0 + k * S, kind="trt_benchmark", severity="info", title=f"trtexec {k}",
                            facts={"throughput_qps": 100.0 + k}) for k in range(2)]  # fmt: skip
    device.send(*bench)
    got = incidents(engine)
    assert [(i.kind, i.count, i.state, i.ended_ns) for i in got] == [
        ("trt_benchmark", 1, "resolved", T0), ("trt_benchmark", 1, "resolved", T0 + S),
    ]  # fmt: skip
    assert incidents(engine, open_only=True) == []


def test_imported_incidents_stay_history_and_apart(engine, device) -> None:  # type: ignore[no-untyped-def]
    device.send(oom(T0, n=1))
    imported = [ImportedIncident(key=f"k{n}", ts_ns=T0 + n * S, kind="cuda_oom", severity="error", title=f"old {n}",
                                 facts={"device_index": 0}, source="/old/train.log", excerpt="") for n in (1, 2)]  # fmt: skip
    import_incidents(engine, device="gpu-node-1", incidents=imported)
    device.send(oom(T0 + 3 * S, n=2))
    got = incidents(engine)
    assert sorted((i.origin, i.state, i.count) for i in got) == [
        ("agent", "open", 2), ("import", "resolved", 1), ("import", "resolved", 1),
    ]  # fmt: skip


@pytest.fixture
def nvml(tmp_path: Path) -> Iterator[NvmlReporter]:
    r = NvmlReporter(tmp_path)
    yield r
    r.close()


def test_xid_from_both_reporters_counts_once_per_fault(engine, device, nvml) -> None:  # type: ignore[no-untyped-def]
    # Three Xid 31 faults on one GPU a minute apart, each seen by NVML and in the kernel log, the
    # two reports in either order and in separate batches (the second of each pair a few seconds later).
    for k in range(3):
        ts = T0 + k * MIN
        line, event = kernel_report(line_xid31_bus01(), ts), nvml.report(31, ts + 2 * S)
        first, second = (line, event) if k % 2 == 0 else (event, line)
        device.send(first)
        device.send(second)
    (inc,) = incidents(engine)
    assert (inc.kind, inc.count, inc.group_key, inc.gpu_index) == ("gpu_xid", 3, "xid:31", 0)
    assert inc.facts["sources"] == "kernel_log,nvml" and inc.facts["last"]["sources"] == "kernel_log,nvml"
    assert (inc.ts_ns, inc.last_seen_ns) == (T0, T0 + 2 * MIN)
    assert (inc.pid, inc.process_name) == (13705, "UnrealEditor")
    # A fourth fault of another code on that GPU is another incident.
    device.send(nvml.report(13, T0 + 3 * MIN))
    assert [(i.group_key, i.count) for i in incidents(engine)] == [("xid:31", 3), ("xid:13", 1)]


# ------------------------------------------------------------------------------ queries


@pytest.fixture
def fleet(engine, device, tmp_path: Path, collector) -> Iterator[dict[str, int]]:  # type: ignore[no-untyped-def]
    """gpu-node-1 (site=test): an open CUDA OOM of 2 occurrences with samples and logs around
    it, and a resolved Xid; gpu-node-2 (site=test, too): a host OOM a day ago."""
    samples = [GpuSample(ts_ns=T0 + k * 10 * S, gpu_index=0, memory_used_bytes=(20 + k) * GIB, memory_total_bytes=80 * GIB,
                         temp_c=60.0 + k, sm_clock_mhz=1410.0 - 10 * k) for k in range(-6, 7)]  # fmt: skip
    host = [HostSample(ts_ns=T0 + k * 10 * S, mem_used_bytes=(30 + k) * GIB, mem_total_bytes=64 * GIB) for k in range(-6, 7)]
    logs = [LogEvent(ts_ns=T0 - 5 * S, source="/var/log/train.log", message="allocating \x1b[31mbatch\x1b[0m 512"),
            LogEvent(ts_ns=T0 + 20 * MIN, source="/var/log/train.log", message="far away")]  # fmt: skip
    device.send(oom(T0, n=1, pid=4242, process_name="train.py"), gpu=samples, host=host, logs=logs)
    device.send(oom(T0 + MIN, n=2))
    device.send(IncidentRecord(ts_ns=T0 + 30 * MIN, kind="gpu_xid", severity="critical", title="Xid 79 on GPU 0",
                               facts={"xid": 79, "gpu_index": 0}, source="nvml"))  # fmt: skip
    with Session(engine) as s, s.begin():
        s.execute(update(Incident).where(Incident.kind == "gpu_xid").values(state="resolved", ended_ns=T0 + 40 * MIN))
        s.execute(update(Incident).where(Incident.kind == "cuda_oom").values(
            hints=[{"text": "GPU memory grew 6 GiB in the minute before", "facts": {"slope": 1}}]))
    other = Device(tmp_path, collector.port, "gpu-node-2")
    try:
        other.send(IncidentRecord(ts_ns=T0 - 24 * 3600 * S, kind="host_oom", severity="error", title="OOM killer"))
    finally:
        other.close()
    with Session(engine) as s:
        ids = {i.kind: i.id for i in search_incidents(session=s, since_ns=0, until_ns=2**62)}
    yield ids


def test_query_filters_combine(engine, fleet) -> None:  # type: ignore[no-untyped-def]
    kinds = lambda **f: sorted(i.kind for i in incidents(engine, **f))  # noqa: E731
    assert kinds(open_only=True) == ["cuda_oom", "host_oom"]
    assert kinds(kinds=["cuda_oom", "gpu_xid"]) == ["cuda_oom", "gpu_xid"]
    assert kinds(kinds=["cuda_oom", "gpu_xid"], open_only=True) == ["cuda_oom"]
    assert kinds(labels={"site": "test"}) == ["cuda_oom", "gpu_xid", "host_oom"]
    assert kinds(labels={"site": "elsewhere"}) == []
    with Session(engine) as s:
        # The range overlaps the OOM's span (start to last occurrence), not only its start.
        later = search_incidents(session=s, since_ns=T0 + 30 * S, until_ns=T0 + 2 * MIN, kinds=["cuda_oom"])
        assert [i.count for i in later] == [2]
        assert search_incidents(session=s, since_ns=0, until_ns=T0 - 3600 * S, open_only=True)[0].kind == "host_oom"
        with pytest.raises(UnknownIncidentKind) as err:
            search_incidents(session=s, since_ns=0, until_ns=2**62, kinds=["cuda_oom", "cuda_omm"])
    assert "'cuda_omm'" in str(err.value) and all(k in str(err.value) for k in INCIDENT_KINDS)


def test_incident_with_context_covers_its_whole_span(engine, fleet) -> None:  # type: ignore[no-untyped-def]
    with Session(engine) as s:
        ctx = incident_with_context(session=s, incident_id=fleet["cuda_oom"], before_s=60, after_s=60)
    assert (ctx.since_ns, ctx.until_ns) == (T0 - MIN, T0 + 2 * MIN)  # to a minute after the last occurrence
    assert ctx.incident.hints[0]["text"].startswith("GPU memory grew")
    assert [ln.message for ln in ctx.logs][:1] == ["allocating \x1b[31mbatch\x1b[0m 512"]
    assert ctx.host and ctx.gpu and ctx.summary.gpus[0].memory_used_bytes == 20 * GIB


# ------------------------------------------------------------------------------ the CLI


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = fleetscope(list(args))
    except SystemExit as exc:  # argparse refusing an argument
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_incidents_command_flags(db_url: str, fleet, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = cli(capsys, "incidents", "--db", db_url, "--since", "30d")
    assert code == 0
    header = out.splitlines()[0].split()
    assert header[:7] == ["ID", "STARTED", "LAST", "SEEN", "DEVICE", "KIND", "STATE"] and "COUNT" in header
    oom_row = next(ln for ln in out.splitlines() if "cuda_oom" in ln)
    assert " open " in oom_row and " 2 " in oom_row and "ago" in oom_row
    _, out, _ = cli(capsys, "incidents", "--db", db_url, "--since", "30d", "--open")
    assert "cuda_oom" in out and "host_oom" in out and "gpu_xid" not in out
    # Several --kind at once (not only the last), combined with --open.
    _, out, _ = cli(capsys, "incidents", "--db", db_url, "--since", "30d", "--kind", "cuda_oom", "--kind", "gpu_xid", "--json")
    assert sorted(i["kind"] for i in json.loads(out)["incidents"]) == ["cuda_oom", "gpu_xid"]
    _, out, _ = cli(capsys, "incidents", "--db", db_url, "--since", "30d", "--kind", "cuda_oom", "--kind", "gpu_xid", "--open")
    assert "cuda_oom" in out and "gpu_xid" not in out
    _, out, _ = cli(capsys, "incidents", "--db", db_url, "--since", "30d", "--label", "site=test", "--json")
    assert len(json.loads(out)["incidents"]) == 3
    _, out, _ = cli(capsys, "incidents", "--db", db_url, "--since", "30d", "--label", "site=mars")
    assert out.strip().startswith("no incidents: --label site=mars matched none")  # says which filter (issue 18)
    # --until: only the host OOM of a day ago started before two hours ago.
    _, out, _ = cli(capsys, "incidents", "--db", db_url, "--since", "30d", "--until", "2h", "--json")
    got = json.loads(out)["incidents"]
    assert [i["kind"] for i in got] == ["host_oom"] and got[0]["state"] == "open" and got[0]["count"] == 1


def test_incidents_command_refuses_an_unknown_kind(db_url: str, fleet, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, err = cli(capsys, "incidents", "--db", db_url, "--kind", "cuda_oom", "--kind", "xid")
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert "unknown incident kind 'xid'" in line and "gpu_xid" in line and "cuda_oom" in line
    code, _, err = cli(capsys, "incidents", "--db", db_url, "--label", "site")
    assert code == 2 and "key=value" in err and "Traceback" not in err


def test_incident_command_shows_one_whole(db_url: str, fleet, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, err = cli(capsys, "incident", str(fleet["cuda_oom"]), "--db", db_url, "--before", "1m", "--after", "1m")
    assert code == 0, err
    assert out.startswith(f"incident {fleet['cuda_oom']}: CUDA OOM on cuda:0 #1")
    assert "open, 2 occurrences" in out and "train.py (pid 4242)" in out
    assert "\nfacts\n" in out and "device_index" in out and "latest occurrence" in out
    # The context chart: sparklines of GPU memory, temperature, clocks and host memory.
    for row in ("GPU 0 memory", "GPU 0 temp", "GPU 0 SM clock", "host memory"):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(row))
        assert any(c in line for c in "▁▂▃▄▅▆▇█"), line
    assert "^ started" in out and "20.0 GiB of 80.0 GiB" in out
    assert "GPU memory grew 6 GiB in the minute before" in out
    # Log lines from that device near it, made visible (no escape sequence reaches the terminal).
    assert "allocating \\x1b[31mbatch\\x1b[0m 512" in out and "\x1b" not in out and "far away" not in out


def test_incident_command_json(db_url: str, fleet, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = cli(capsys, "incident", str(fleet["cuda_oom"]), "--db", db_url, "--json")
    assert code == 0
    doc = json.loads(out)
    assert (doc["id"], doc["kind"], doc["count"], doc["state"]) == (fleet["cuda_oom"], "cuda_oom", 2, "open")
    assert doc["facts"]["last"]["n"] == 2 and doc["hints"][0]["facts"] == {"slope": 1}
    ctx = doc["context"]
    assert ctx["incident_id"] == doc["id"] and ctx["gpu"] and ctx["host"] and ctx["logs"]
    assert ctx["summary"]["gpus"][0]["gpu_index"] == 0 and isinstance(ctx["nearby"], list)


def test_incident_command_errors(db_url: str, fleet, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, err = cli(capsys, "incident", "999999", "--db", db_url)
    assert (code, out) == (1, "") and err.strip() == "fleetscope incident: no incident with id 999999"
    code, out, err = cli(capsys, "incident", "abc", "--db", db_url)
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err


def test_incident_rows_are_not_a_flood(engine, device) -> None:  # type: ignore[no-untyped-def]
    # An OOM loop: 50 occurrences, five per batch, ten batches: one row.
    for b in range(10):
        device.send(*(oom(T0 + (b * 5 + k) * S, n=b * 5 + k) for k in range(5)))
    with Session(engine) as s:
        rows = list(s.scalars(select(Incident)))
    assert len(rows) == 1 and rows[0].count == 50 and rows[0].facts["last"]["n"] == 49
