"""Property: whatever a sender puts in a batch, or in place of one, the collector answers with
a verdict about that data (STORED, DUPLICATE, REJECTED with INVALID_ARGUMENT, or the stream ended
with INVALID_ARGUMENT / RESOURCE_EXHAUSTED / UNAUTHENTICATED), never UNAVAILABLE or UNKNOWN, and
a well-behaved agent streaming beside it stays exactly-once. Runs against a real collector
(real gRPC) on SQLite and on PostgreSQL, with a bounded number of examples."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.conftest import wait_until
from tests.helpers import CountingSampler, gpu_sequence_numbers, make_agent

MD = (("authorization", "Bearer test-token"),)
INT64 = st.integers(-(2**63), 2**63 - 1)
UINT64 = st.integers(0, 2**64 - 1)
# Texts the databases might refuse: NUL, lone surrogates are not encodable in protobuf so left out.
TEXT = st.one_of(
    st.text(max_size=30),
    st.text(alphabet=st.sampled_from("a\x00\ufffd\u00e9 "), max_size=30),
    st.sampled_from(["x" * 70_000, "\x00" * 5, "y" * 300]),
)
FLOAT = st.floats(allow_nan=True, allow_infinity=True)
LABELS = st.one_of(st.dictionaries(TEXT, TEXT, max_size=4), st.just({f"k{i}": "v" for i in range(100)}))


@st.composite
def batches(draw, agent_id: str) -> bytes:  # type: ignore[no-untyped-def]
    now = time.time_ns()
    b = pb.Batch(
        agent_id=draw(st.sampled_from([agent_id, agent_id, agent_id, "", "a" * 100_000, "x\x00y"])),
        boot_id=draw(st.sampled_from(["b", "", "b\x00", "z" * 65])),
        seq=draw(st.one_of(st.integers(1, 2**40), UINT64)),
        created_ns=now,
        sent_ns=draw(st.one_of(st.just(now), INT64)),
    )
    ts = draw(st.one_of(st.just(now), INT64))
    rows = draw(st.integers(0, 3))
    for i in range(rows):
        b.gpu.ts_ns.append(now + i)
        b.gpu.gpu_index.append(draw(st.integers(0, 300)))
    if rows:
        b.gpu.temp_c.values.extend(draw(st.lists(FLOAT, min_size=rows, max_size=rows)))
    for _ in range(draw(st.integers(0, 2))):
        b.logs.add(ts_ns=draw(st.one_of(st.just(now), INT64)), source=draw(TEXT), message=draw(TEXT), level=draw(st.integers(0, 5)))
    for _ in range(draw(st.integers(0, 2))):
        inc = b.incidents.add(ts_ns=now, kind=draw(TEXT), title=draw(TEXT), excerpt=draw(TEXT), source=draw(TEXT))
        for key in draw(st.lists(TEXT, max_size=3)):
            kind = draw(st.sampled_from(["real", "integer", "text", "flag"]))
            value = {"real": FLOAT, "integer": INT64, "text": TEXT, "flag": st.booleans()}[kind]
            setattr(inc.facts[key], kind, draw(value))
    for _ in range(draw(st.integers(0, 2))):
        m = b.metrics.add(name=draw(TEXT), ts_ns=draw(st.one_of(st.just(ts), INT64)), value=draw(FLOAT))
        m.labels.update(draw(LABELS))
    for _ in range(draw(st.integers(0, 1))):
        count = draw(UINT64)
        h = b.latency.add(name=draw(TEXT), start_ns=max(ts - 1, -(2**63)), end_ns=ts, count=count, zero_count=count, sum_ns=draw(UINT64))
        h.labels.update(draw(LABELS))
    for _ in range(draw(st.integers(0, 1))):
        r = b.inventory_records.add(kind=draw(TEXT), name=draw(TEXT), ts_ns=draw(st.one_of(st.just(now), INT64)))
        r.facts["x"].real = draw(FLOAT)
    if draw(st.booleans()):
        b.counters.rss_bytes = draw(FLOAT)
        b.counters.spool_bytes = draw(UINT64)
        b.counters.last_rejection = draw(TEXT)
    return b.SerializeToString()


PAYLOADS = st.one_of(st.binary(max_size=300), st.just(b"\x0a\x02\xc3\x28"))  # random bytes, invalid UTF-8


def test_any_batch_gets_a_data_verdict_and_the_neighbour_stays_exactly_once(tmp_path: Path, db_url: str, collector) -> None:
    sampler = CountingSampler(total=1_500, per_tick=10)
    neighbour = make_agent(tmp_path, [f"127.0.0.1:{collector.port}"], sampler, name="neighbour")
    neighbour.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{collector.port}", options=[("grpc.max_send_message_length", 64 << 20)])
    agent_id = str(uuid.uuid4())
    register = channel.unary_unary("/fleetscope.v1.Ingest/Register", request_serializer=pb.RegisterRequest.SerializeToString,
                                   response_deserializer=pb.RegisterResponse.FromString)
    register(pb.RegisterRequest(agent_id=agent_id, boot_id="b", name="fuzzer", sent_ns=time.time_ns()), metadata=MD, timeout=10)
    stream = channel.stream_stream("/fleetscope.v1.Ingest/Stream", request_serializer=lambda b: b, response_deserializer=pb.Ack.FromString)
    verdicts: dict[str, int] = {}

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(payload=st.one_of(batches(agent_id), PAYLOADS))
    def send(payload: bytes) -> None:
        try:
            acks = list(stream(iter([payload]), metadata=MD, timeout=30))
        except grpc.RpcError as exc:
            code = exc.code()
            assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAUTHENTICATED), (
                code, exc.details())
            verdicts[code.name] = verdicts.get(code.name, 0) + 1
            return
        assert len(acks) <= 1
        for ack in acks:
            assert ack.status in (pb.Ack.STATUS_STORED, pb.Ack.STATUS_DUPLICATE, pb.Ack.STATUS_REJECTED), ack
            if ack.status == pb.Ack.STATUS_REJECTED:
                assert ack.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and ack.reason, ack
            verdicts[pb.Ack.Status.Name(ack.status)] = verdicts.get(pb.Ack.Status.Name(ack.status), 0) + 1

    try:
        send()
        wait_until(sampler.done, timeout_s=60, message="neighbour sampled")
        wait_until(lambda: len(gpu_sequence_numbers(db_url, "neighbour")) >= 1_500, timeout_s=60, message="neighbour stored")
    finally:
        channel.close()
        neighbour.stop()
    assert sorted(gpu_sequence_numbers(db_url, "neighbour")) == list(range(1_500)), "exactly once beside the fuzzing"
    assert verdicts.get("STATUS_REJECTED", 0) > 0 and verdicts.get("INVALID_ARGUMENT", 0) > 0, verdicts
