"""The CLI and the dashboard answer the same question through the same read function.

For devices, incidents, logs and latency: a spy wraps the query API's function (calling through
to it) at every place that holds a reference to it, then the real CLI command
(``fleetscope.cli.main``) and the dashboard's data function run against the same database. Both
must call the function, and get the same answer. A reader that bypassed it (its own SQL, a copy
of the function, a private helper) would leave the spy uncalled and fail here.

The data goes in through the real pipeline: an agent's records and SDK report, its spool and
uplink, a collector over gRPC.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("streamlit")

from fleetscope.agent.records import IncidentRecord, LogEvent  # noqa: E402
from fleetscope.agent.samplers._base import SampleSet  # noqa: E402
from fleetscope.cli import main as fleetscope  # noqa: E402
from fleetscope.collector import query  # noqa: E402
from fleetscope.proto import buckets as bucket_math  # noqa: E402
from fleetscope.proto.v1 import telemetry_pb2 as pb  # noqa: E402
from tests.conftest import wait_until  # noqa: E402
from tests.helpers import IdleSampler, make_agent  # noqa: E402

S = 10**9
DEVICE = "reader-node"


@dataclass
class Spy:
    """Calls of one query function, in order: the keyword arguments and what it returned."""

    name: str
    calls: list[tuple[dict[str, Any], Any]] = field(default_factory=list)

    def take(self) -> list[tuple[dict[str, Any], Any]]:
        taken, self.calls = self.calls, []
        return taken

    def one_call(self, reader: str) -> tuple[dict[str, Any], Any]:
        """The single call ``reader`` made since the last look: its arguments and its answer."""
        taken = self.take()
        assert len(taken) == 1, (
            f"{reader} called fleetscope.collector.query.{self.name} {len(taken)} times, not once"
        )
        return taken[0]


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Spy]:
    def install(name: str) -> Spy:
        original = getattr(query, name)
        record = Spy(name)

        def spying(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            record.calls.append((kwargs, result))
            return result

        # Every import site: the package, the module that defines it, and any module that imported
        # it (under any name). A caller that imports it lazily reads the patched package attribute.
        # A reference kept anywhere else (a copy, a closure) is not patched, so its calls go
        # unseen and the test fails, as it should for a reader that does not call the API.
        sites = [
            (m, attr)
            for m in list(sys.modules.values())
            if getattr(m, "__name__", "").startswith("fleetscope.")
            for attr, value in list(vars(m).items())
            if value is original
        ]
        assert (query, name) in sites, (
            f"fleetscope.collector.query.{name} is not the function the API exports"
        )
        for module, attr in sites:
            monkeypatch.setattr(module, attr, spying)
        return record

    return install


@pytest.fixture
def stored(tmp_path: Path, db_url: str, quiet_collector) -> Iterator[int]:  # type: ignore[no-untyped-def]
    """One device with logs, two incidents and an operation's latency histograms, stored an hour ago."""
    t0 = (time.time_ns() - 3600 * S) // S * S
    records = SampleSet(
        logs=[
            LogEvent(
                ts_ns=t0 + i * S, source="/var/log/train.log", message=f"step {i} loss 0.{i}", level="info"
            )
            for i in range(5)
        ]
        + [LogEvent(ts_ns=t0 + 6 * S, source="kmsg", message="NVRM: Xid 79", level="critical")],
        incidents=[
            IncidentRecord(ts_ns=t0 + 2 * S, kind="cuda_oom", severity="error", title="CUDA OOM on cuda:0"),
            IncidentRecord(ts_ns=t0 + 6 * S, kind="gpu_xid", severity="critical", title="Xid 79"),
        ],
    )
    durations_ms = [3.0 + (i % 7) for i in range(200)]
    hist: dict[int, int] = {}
    for ms in durations_ms:
        i = bucket_math.bucket_index(ms * 1e6)
        hist[i] = hist.get(i, 0) + 1
    report = pb.SdkReport(
        latency=[
            pb.LatencyHistogram(
                name="infer",
                labels={"model": "resnet"},
                start_ns=t0 + k * 10 * S,
                end_ns=t0 + (k + 1) * 10 * S,
                count=len(durations_ms),
                sum_ns=int(sum(durations_ms) * 1e6),
                errors=k,
                bucket_index=list(hist),
                bucket_count=list(hist.values()),
            )
            for k in range(3)
        ]
    )
    agent = make_agent(tmp_path, [f"127.0.0.1:{quiet_collector.port}"], IdleSampler(), name=DEVICE)
    agent.add(records)
    agent.add_sdk_report(report)
    agent.flush()
    agent.uplink.start()
    try:
        assert agent.uplink.drain(30), "batches not acknowledged"
    finally:
        agent.uplink.stop()
        agent.spool.close()
    # The collector's detector pass resolves these hour-old events as quiet (and sets when it did):
    # wait for it, so that the readers compared below read one settled state, not one from before
    # that pass and one from after it (a loaded machine once put the pass between two reads).
    from sqlalchemy import create_engine, text

    engine = create_engine(query.normalise_url(db_url))
    try:
        def settled() -> bool:
            with engine.connect() as conn:
                states = conn.execute(text("SELECT state FROM incidents")).scalars().all()
            return len(states) == 2 and all(s == "resolved" for s in states)

        wait_until(settled, timeout_s=60, message="the detector pass to resolve the stored incidents")
    finally:
        engine.dispose()
    yield t0


@pytest.fixture
def dashboard(db_url: str) -> Iterator[Any]:
    """The dashboard's data layer with empty caches, its engine disposed afterwards."""
    import streamlit as st

    from fleetscope.dashboard import data

    st.cache_data.clear()
    st.cache_resource.clear()
    yield data
    data._engine(query.normalise_url(db_url)).dispose()
    st.cache_resource.clear()
    st.cache_data.clear()


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert fleetscope(list(args)) == 0
    return capsys.readouterr().out


def test_devices(stored, db_url: str, dashboard, spy, capsys) -> None:  # type: ignore[no-untyped-def]
    calls = spy("list_devices")
    printed = json.loads(_cli(capsys, "devices", "--db", db_url, "--json"))["devices"]
    _, cli_answer = calls.one_call("the CLI")
    shown = dashboard.devices(query.normalise_url(db_url), time.time_ns())
    _, dashboard_answer = calls.one_call("the dashboard")
    assert [d.name for d in cli_answer] == [DEVICE]
    assert dashboard_answer == cli_answer == shown
    assert printed == json.loads(json.dumps(query.to_jsonable(shown)))


def test_incidents(stored, db_url: str, dashboard, spy, capsys) -> None:  # type: ignore[no-untyped-def]
    t0 = stored
    calls = spy("search_incidents")
    printed = _cli(
        capsys, "incidents", "--db", db_url, "--device", DEVICE, "--kind", "cuda_oom", "--since", "2h"
    )
    cli_args, cli_answer = calls.one_call("the CLI")
    shown = dashboard.incidents(
        query.normalise_url(db_url), t0 - 3600 * S, time.time_ns() + S, kinds=("cuda_oom",), devices=(DEVICE,)
    )
    dashboard_args, dashboard_answer = calls.one_call("the dashboard")
    assert (cli_args["kinds"], cli_args["devices"]) == (dashboard_args["kinds"], dashboard_args["devices"])
    assert [i.title for i in cli_answer] == ["CUDA OOM on cuda:0"] and "CUDA OOM on cuda:0" in printed
    assert dashboard_answer == cli_answer == shown


def test_logs(stored, db_url: str, dashboard, spy, capsys) -> None:  # type: ignore[no-untyped-def]
    t0 = stored
    calls = spy("search_logs")
    printed = json.loads(_cli(capsys, "logs", "--db", db_url, "--device", DEVICE, "--grep", "loss", "--json"))
    _, cli_answer = calls.one_call("the CLI")
    shown = dashboard.logs(
        query.normalise_url(db_url), DEVICE, t0 - 3600 * S, time.time_ns() + S, None, "loss"
    )
    _, dashboard_answer = calls.one_call("the dashboard")
    assert [ln.message for ln in cli_answer] == [f"step {i} loss 0.{i}" for i in range(5)]
    assert dashboard_answer == cli_answer == shown
    assert printed["logs"] == json.loads(json.dumps(query.to_jsonable(shown)))
    # A level: the CLI keeps that level, the dashboard that level and worse; one function, asked each way.
    _cli(capsys, "logs", "--db", db_url, "--device", DEVICE, "--level", "critical")
    cli_args, cli_answer = calls.one_call("the CLI")
    dashboard.logs(query.normalise_url(db_url), DEVICE, t0 - 3600 * S, time.time_ns() + S, "error", None)
    dashboard_args, dashboard_answer = calls.one_call("the dashboard")
    assert (list(cli_args["levels"]), list(dashboard_args["levels"])) == (["critical"], ["error", "critical"])
    assert [ln.message for ln in cli_answer] == [ln.message for ln in dashboard_answer] == ["NVRM: Xid 79"]


def test_latency(stored, db_url: str, dashboard, spy, capsys) -> None:  # type: ignore[no-untyped-def]
    """`fleetscope latency` reads `latency_stats`; the Compare page reads `compare_with_operations`, whose
    figures (and the p99 chart beside them) come from one read of the groups' histograms. The
    operation's figures must be the same through both."""
    t0 = stored
    calls = spy("latency_stats")
    (printed,) = json.loads(
        _cli(
            capsys,
            "latency",
            "--db",
            db_url,
            "--device",
            DEVICE,
            "--name",
            "infer",
            "--since",
            "2h",
            "--json",
        )
    )["latency"]
    _, cli_answer = calls.one_call("the CLI")
    comparisons = spy("compare_with_operations")
    # The Compare page's question for a group of this one device: the same operation, label sets merged.
    comparison = dashboard.comparison(
        query.normalise_url(db_url), (("A", (DEVICE,)),), t0 - 3600 * S, time.time_ns() + S, "infer"
    )
    (compared,) = comparison.groups
    _, answer = comparisons.one_call("the dashboard")
    (dashboard_answer,) = answer.groups
    assert (comparison.operations, comparison.operation) == (["infer"], "infer")
    (cli_stats,) = cli_answer
    dashboard_stats = dashboard_answer.latency
    assert compared == dashboard_answer and dashboard_stats is not None
    assert (cli_stats.labels, dashboard_stats.labels) == ({"model": "resnet"}, {}), (
        "one label set, merged or not"
    )
    figures = ("count", "errors", "window_s", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "qps")
    assert [getattr(cli_stats, f) for f in figures] == [getattr(dashboard_stats, f) for f in figures]
    assert dashboard_answer.latency_series is not None and sum(dashboard_answer.latency_series.count) == 600
    assert (cli_stats.count, cli_stats.errors, cli_stats.window_s) == (600, 0 + 1 + 2, 30.0)
    assert cli_stats.qps == pytest.approx(20.0), "600 calls over 30 measured seconds"
    assert (printed["count"], printed["p99_ms"], printed["calls_per_s"]) == (
        600,
        cli_stats.p99_ms,
        cli_stats.qps,
    )


def test_a_reader_that_bypasses_the_function_goes_unseen(stored, db_url: str, spy) -> None:  # type: ignore[no-untyped-def]
    """The spy is not satisfied by just anything: a reader holding its own handle on the query
    (here a copy taken before the spy went in) is not seen, so the tests above would fail on it."""
    own_copy = functools.partial(query.search_logs)
    calls = spy("search_logs")
    engine = query.open_database(db_url)
    try:
        with query.session_scope(engine) as session:
            assert own_copy(session=session, device=DEVICE, since_ns=0, until_ns=2**62)
            assert calls.take() == []
            query.search_logs(session=session, device=DEVICE, since_ns=0, until_ns=2**62)
            assert len(calls.take()) == 1
    finally:
        engine.dispose()
