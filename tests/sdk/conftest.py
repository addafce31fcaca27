"""Fixtures: a real LocalReportServer on a Unix socket in a per-test temporary folder."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from fleetscope.agent import sdk
from fleetscope.agent.daemon.local_server import LocalReportServer
from fleetscope.agent.sdk import Histogram
from fleetscope.agent.sdk._facts import fact_value
from fleetscope.proto.v1 import telemetry_pb2 as pb


class Sink:
    """Collects what the server receives; waits for what a test expects, with a deadline."""

    def __init__(self) -> None:
        self.reports: list[pb.SdkReport] = []
        self._cond = threading.Condition()

    def __call__(self, report: pb.SdkReport) -> None:
        with self._cond:
            self.reports.append(report)
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[Sink], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.05))
        return True

    def histograms(self, name: str, **labels: str) -> list[pb.LatencyHistogram]:
        return [
            h
            for r in list(self.reports)
            for h in r.latency
            if h.name == name and (not labels or dict(h.labels) == labels)
        ]

    def merged(self, name: str, **labels: str) -> Histogram:
        out = Histogram()
        for h in self.histograms(name, **labels):
            out.merge(Histogram.from_proto(h))
        return out

    def incidents(self, kind: str | None = None) -> list[pb.Incident]:
        return [i for r in list(self.reports) for i in r.incidents if kind is None or i.kind == kind]

    def metrics(self, name: str) -> list[pb.MetricPoint]:
        return [m for r in list(self.reports) for m in r.metrics if m.name == name]

    def logs(self) -> list[pb.LogEvent]:
        return [e for r in list(self.reports) for e in r.logs]

    def inventory(self, kind: str) -> list[pb.InventoryRecord]:
        return [i for r in list(self.reports) for i in r.inventory_records if i.kind == kind]


def facts(message: pb.Incident | pb.InventoryRecord) -> dict[str, object]:
    return {k: fact_value(v) for k, v in message.facts.items()}


@pytest.fixture(autouse=True)
def _isolated_sdk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # Every test starts pointed at a socket nobody serves, never at the real /run/fleetscope.
    absent = tmp_path_factory.mktemp("noagent") / "agent.sock"
    sdk.configure(socket=str(absent), flush_interval_s=0.1, max_queue=20_000, disabled=False)
    yield
    sdk.shutdown(1.0)


@pytest.fixture
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalReportServer, Sink]]:
    """A LocalReportServer the SDK reports to, flushing every 0.1 s."""
    sink = Sink()
    folder = tmp_path_factory.mktemp("run")
    server = LocalReportServer(os.path.join(str(folder), "fleetscope", "agent.sock"), sink)
    server.start()
    sdk.configure(socket=server.socket_path, flush_interval_s=0.1)
    try:
        yield server, sink
    finally:
        sdk.shutdown(1.0)
        server.stop(0.5)
