"""The transport: no agent, an agent that appears later, a full queue, a hung agent, process exit, fork."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import grpc
import pytest

from fleetscope.agent import sdk
from fleetscope.agent.daemon.local_server import LocalReportServer, prepare_socket_path
from fleetscope.proto.v1 import telemetry_pb2 as pb
from fleetscope.proto.v1 import telemetry_pb2_grpc

from .conftest import Sink

REPO = Path(__file__).resolve().parents[2]


def _run_script(
    code: str, env: dict[str, str], timeout: float = 30.0
) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    return proc, time.monotonic() - t0


def test_without_an_agent_latency_works_nothing_raises_and_drops_are_counted() -> None:
    before = sdk.stats().dropped_total
    for _ in range(1000):
        with sdk.latency("test.noagent"):
            pass
    sdk.metric("test.noagent.loss", 0.5)
    sdk.log("hello")
    sdk.report_incident("nan_loss", "error", "t")
    t0 = time.monotonic()
    assert sdk.flush(2.0) is False
    assert time.monotonic() - t0 < 1.0  # no socket file: no RPC is even tried
    stats = sdk.stats()
    assert stats.dropped_total >= before + 4  # the latency window and three queued records
    assert stats.dropped_unreported >= stats.dropped_total - before
    assert "no agent socket" in stats.last_error
    s = sdk.latency_summary("test.noagent")
    assert s is not None and s.count == 1000


@pytest.mark.server
def test_dropped_count_reaches_an_agent_that_starts_later(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("late")
    path = os.path.join(str(folder), "agent.sock")
    sdk.configure(socket=path)
    for _ in range(3):
        sdk.metric("test.late", 1.0)
    sdk.flush(2.0)
    dropped = sdk.stats().dropped_unreported
    assert dropped >= 3
    sink = Sink()
    server = LocalReportServer(path, sink)
    server.start()
    try:
        sdk.metric("test.late", 2.0)
        assert sdk.flush(5.0)
        assert sink.wait_for(lambda s: any(r.dropped >= dropped for r in s.reports))
        assert [m.value for m in sink.metrics("test.late")] == [2.0]
        assert sdk.stats().dropped_unreported == 0
        assert sink.reports[0].process.pid == os.getpid()
    finally:
        server.stop(0.5)


def test_a_full_queue_drops_and_counts_instead_of_growing() -> None:
    sdk.configure(max_queue=10)
    before = sdk.stats().dropped_total
    for i in range(100):
        sdk.metric("test.full", float(i))
    assert sdk.stats().queued <= 10
    assert sdk.stats().dropped_total - before >= 90


@pytest.mark.server
def test_non_finite_and_unreadable_metric_values_are_not_sent(agent) -> None:
    _, sink = agent
    before = sdk.invalid_values()
    sdk.metric("test.values", float("nan"))
    sdk.metric("test.values", float("inf"))
    sdk.metric("test.values", "not a number")
    sdk.metric("test.values", 3)
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: len(s.metrics("test.values")) == 1)
    assert sink.metrics("test.values")[0].value == 3.0
    assert sdk.invalid_values() - before == 3


@pytest.mark.server
def test_records_are_split_into_reports_below_the_limit(agent) -> None:
    _, sink = agent
    sdk.configure(max_records_per_report=50)
    for i in range(420):
        sdk.metric("test.split", float(i))
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: len(s.metrics("test.split")) == 420)
    assert max(len(r.metrics) for r in sink.reports) <= 50


@pytest.mark.server
def test_process_labels_and_name_travel_in_process_ref(agent) -> None:
    _, sink = agent
    sdk.configure(process_name="trainer", labels={"job": "j1", "rank": 0})
    sdk.metric("test.ref", 1.0)
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: bool(s.metrics("test.ref")))
    report = next(r for r in sink.reports if r.metrics)
    assert report.process.name == "trainer" and dict(report.process.labels) == {"job": "j1", "rank": "0"}


@pytest.mark.server
def test_a_sink_that_fails_counts_as_dropped(tmp_path_factory: pytest.TempPathFactory) -> None:
    def sink(report: pb.SdkReport) -> None:
        raise RuntimeError("agent bug")

    path = os.path.join(str(tmp_path_factory.mktemp("bad")), "agent.sock")
    server = LocalReportServer(path, sink)
    server.start()
    try:
        sdk.configure(socket=path)
        before = sdk.stats().dropped_total
        sdk.metric("test.badsink", 1.0)
        assert sdk.flush(5.0) is False
        assert sdk.stats().dropped_total > before
        assert "INTERNAL" in sdk.stats().last_error
    finally:
        server.stop(0.5)


@pytest.mark.processes
def test_import_does_not_load_torch_numpy_grpc_or_start_a_thread() -> None:
    code = """
        import sys, threading
        import fleetscope.agent.sdk as sdk
        heavy = [m for m in ("torch", "numpy", "tensorrt", "onnxruntime", "grpc") if m in sys.modules]
        assert not heavy, heavy
        assert threading.active_count() == 1
        for name in sdk.__all__:
            if name != "FleetscopeTrtLogger":
                getattr(sdk, name)
        with sdk.latency("x"):
            pass
        assert "torch" not in sys.modules
        print("ok")
    """
    proc, _ = _run_script(code, {"FLEETSCOPE_SDK_DISABLED": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.processes
def test_exit_does_not_hang_without_an_agent_or_with_a_stale_socket(tmp_path: Path) -> None:
    stale = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()  # the file stays, nobody listens: ECONNREFUSED on connect
    code = """
        from fleetscope.agent import sdk
        for _ in range(10000):
            with sdk.latency("exit.test"):
                pass
        sdk.metric("exit.metric", 1.0)
        print(sdk.stats().running)
    """
    for target in (str(tmp_path / "absent" / "agent.sock"), str(stale)):
        proc, elapsed = _run_script(code, {"FLEETSCOPE_SDK_SOCKET": target})
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "True"
        assert proc.stderr == ""
        assert elapsed < 15


@pytest.mark.processes
def test_exit_is_bounded_when_the_agent_hangs(tmp_path_factory: pytest.TempPathFactory) -> None:
    import threading

    release = threading.Event()

    def stuck(report: pb.SdkReport) -> None:
        release.wait(30)

    path = os.path.join(str(tmp_path_factory.mktemp("hung")), "agent.sock")
    server = LocalReportServer(path, stuck)
    server.start()
    try:
        code = """
            import time
            from fleetscope.agent import sdk
            sdk.configure(rpc_timeout_s=0.5, exit_flush_timeout_s=1.0)
            with sdk.latency("hung.test"):
                pass
            t0 = time.monotonic()
            ok = sdk.flush(0.3)
            assert time.monotonic() - t0 < 1.0
            print(ok)
        """
        proc, elapsed = _run_script(code, {"FLEETSCOPE_SDK_SOCKET": path})
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "False"
        assert elapsed < 20
    finally:
        release.set()
        server.stop(0.5)


@pytest.mark.processes
def test_a_forked_child_stays_silent_until_configured(tmp_path: Path) -> None:
    code = """
        import os, sys
        from fleetscope.agent import sdk
        with sdk.latency("fork.parent"):
            pass
        sdk.metric("fork.m", 1.0)
        pid = os.fork()
        if pid == 0:
            ok = sdk.latency_summary("fork.parent") is None  # the parent's series are not the child's
            with sdk.latency("fork.child"):
                pass
            sdk.metric("fork.m", 2.0)
            ok = ok and not sdk.stats().running and sdk.stats().queued == 0
            sdk.configure()
            ok = ok and sdk.stats().running
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """
    proc, _ = _run_script(code, {"FLEETSCOPE_SDK_SOCKET": str(tmp_path / "none.sock")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"


def test_disabled_sdk_starts_no_thread_and_still_times() -> None:
    sdk.shutdown(1.0)
    sdk.configure(disabled=True)
    with sdk.latency("test.disabled"):
        pass
    sdk.metric("test.disabled", 1.0)
    assert not sdk.stats().running
    assert sdk.flush(0.5) is False
    assert sdk.latency_summary("test.disabled") is not None


# ---------------------------------------------------------------- LocalReportServer


@pytest.mark.server
def test_server_acks_the_record_count_and_makes_its_directory_0o770(tmp_path: Path) -> None:
    sink = Sink()
    path = tmp_path / "run" / "fleetscope" / "agent.sock"
    with LocalReportServer(str(path), sink) as server:
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o770
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        with grpc.insecure_channel(server.target) as channel:
            stub = telemetry_pb2_grpc.LocalStub(channel)
            report = pb.SdkReport(
                metrics=[pb.MetricPoint(name="m", value=1.0)] * 3, logs=[pb.LogEvent(message="x")]
            )
            ack = stub.Report(report, timeout=5)
        assert ack.accepted == 4
        assert len(sink.reports) == 1
    assert not path.exists()


@pytest.mark.server
def test_server_removes_a_stale_socket_but_not_a_live_one_or_a_file(tmp_path: Path) -> None:
    stale = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    with LocalReportServer(str(stale), Sink()):
        assert stat.S_ISSOCK(os.stat(stale).st_mode)
        with pytest.raises(OSError):
            prepare_socket_path(str(stale))  # live now: another server must not take it over
    regular = tmp_path / "regular"
    regular.write_text("keep me")
    with pytest.raises(FileExistsError):
        LocalReportServer(str(regular), Sink()).start()
    assert regular.read_text() == "keep me"


def test_server_rejects_a_path_too_long_for_a_unix_socket(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        LocalReportServer(str(tmp_path / ("x" * 120) / "agent.sock"), Sink())
