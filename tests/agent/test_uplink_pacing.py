"""A collector that paces registrations (RESOURCE_EXHAUSTED with a ``retry-after``, as its
registration gate answers in a storm after a restart, or an agent's own allowance when spent):
the agent comes back to it when told, again and again, without growing its backoff.

The peer is a real gRPC server on loopback that answers ``Register`` the way the collector's gate
does, so the test can refuse a fixed number of times and time the agent's calls."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.conftest import wait_until
from tests.helpers import CountingSampler, make_agent

REFUSALS = 10
RETRY_AFTER_S = 0.2


class PacingCollector:
    """Answers every Register with RESOURCE_EXHAUSTED and a retry-after; records when each came."""

    def __init__(self, retry_after_s: float = RETRY_AFTER_S) -> None:
        self.retry_after_s = retry_after_s
        self.calls: list[float] = []
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        handler = grpc.method_handlers_generic_handler("fleetscope.v1.Ingest", {
            "Register": grpc.unary_unary_rpc_method_handler(
                self.register, request_deserializer=pb.RegisterRequest.FromString,
                response_serializer=pb.RegisterResponse.SerializeToString),
        })
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.RegisterResponse:
        with self._lock:
            self.calls.append(time.monotonic())
        context.set_trailing_metadata((("retry-after", f"{self.retry_after_s:g}"),))
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"40 registrations are waiting: retry after {self.retry_after_s:g} s")
        raise AssertionError("abort raises")


@pytest.mark.server
def test_an_agent_told_to_retry_after_comes_back_then_without_growing_its_backoff(tmp_path: Path) -> None:
    peer = PacingCollector()
    # The agent's backoff as shipped (doubling to 30 s): counted as failures, ten refusals would
    # have grown it to its cap, about 40 s of waiting on average before the eleventh call.
    agent = make_agent(tmp_path, [f"127.0.0.1:{peer.port}"], CountingSampler(total=10**9), backoff_max_s=30.0,
                       drain_timeout_s=0.5)
    agent.start()
    try:
        wait_until(lambda: len(peer.calls) > REFUSALS, timeout_s=10, message=f"{REFUSALS} refusals then another call")
    finally:
        agent.stop()
        peer.server.stop(0)
    gaps = [b - a for a, b in zip(peer.calls, peer.calls[1:])][:REFUSALS]
    assert min(gaps) >= RETRY_AFTER_S * 0.9, f"came back before it was told to: {gaps}"
    assert max(gaps) < 2.0, f"waited beyond the retry-after: {gaps}"


@pytest.mark.server
def test_a_collector_asking_for_a_retry_at_once_does_not_get_a_flood(tmp_path: Path) -> None:
    """A collector (buggy or hostile) answering "retry after 0.001 s" every time: the agent still
    waits the backoff's shortest pause (half its initial 0.1 s here) between calls."""
    peer = PacingCollector(retry_after_s=0.001)
    agent = make_agent(tmp_path, [f"127.0.0.1:{peer.port}"], CountingSampler(total=10**9), drain_timeout_s=0.5)
    agent.start()
    try:
        time.sleep(2.0)
    finally:
        agent.stop()
        peer.server.stop(0)
    gaps = [b - a for a, b in zip(peer.calls, peer.calls[1:])]
    assert len(gaps) >= 3, peer.calls
    assert min(gaps) >= 0.045, f"{len(peer.calls)} calls in about 2 s, the shortest gap {min(gaps) * 1000:.1f} ms"
