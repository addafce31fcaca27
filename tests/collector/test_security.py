"""Security of the ingest path, tried as an attacker would: TLS and mutual TLS (wrong CA, expired
certificate, plaintext against TLS, no client certificate), enrolment and identity (revoked and
expired tokens, a token of one fleet used for another, one agent claiming another's id, replayed
credentials, a revoked device's open stream), SQL-looking text in every field, and limits per
agent. Each is refused (or stored harmlessly) while the collector goes on serving the others.

Real gRPC over loopback, real SQLite and PostgreSQL (``db_url``), real agents where it matters.
"""

from __future__ import annotations

import datetime as dt
import os
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from sqlalchemy import create_engine, text

from fleetscope.agent.daemon.batcher import fill_gpu
from fleetscope.agent.daemon.credentials import ChannelTLS, load_or_create_device_key
from fleetscope.agent.daemon.uplink import with_sent_ns
from fleetscope.agent.records import GpuSample
from fleetscope.cli import main
from fleetscope.collector.commands.certs import init_certs, issue_certificate, load_or_create_ca
from fleetscope.collector.ingest.agent_limits import AgentLimiter, AgentLimits
from fleetscope.collector.ingest.server import Collector, CollectorSettings
from fleetscope.collector.ingest.tls import ServerTLS
from fleetscope.collector.storage.credentials import create_enrolment_token, revoke_enrolment_token
from fleetscope.collector.storage.engine import make_engine, normalise_url
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.conftest import wait_until
from tests.helpers import (
    CountingSampler,
    gpu_sequence_numbers,
    make_agent,
    sample_count,
    stored_samples,
    table_count,
)

STATIC = "test-token"
SQLISH = "x'); DROP TABLE devices; --"


# ---------------------------------------------------------------- fixtures and raw clients


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    init_certs(d, agents=["a1"])
    return d


def start_collector(db_url: str, *, tls: ServerTLS | None = None, tokens: frozenset[str] | None = frozenset([STATIC]),
                    **settings: object) -> Collector:
    c = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=db_url, tokens=tokens, tls=tls, grace_s=2.0,
                                    revocation_poll_s=0.2, detectors=None, rollups=False, **settings))  # type: ignore[arg-type]
    c.start()
    return c


@pytest.fixture
def running(db_url: str) -> Iterator[Collector]:
    c = start_collector(db_url)
    yield c
    c.stop()


def address(c: Collector) -> str:
    return f"127.0.0.1:{c.port}"


def metadata(*, token: str = "", agent_id: str = "", key: str = "") -> tuple[tuple[str, str], ...]:
    md: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
    if key:
        md += (("fleetscope-agent-id", agent_id), ("fleetscope-device-key", key))
    return md


def register(addr: str, agent_id: str, *, token: str = "", key: str = "", name: str = "", labels: dict[str, str] | None = None,
             channel_credentials: object = None) -> grpc.StatusCode:
    """One Register call; returns OK or the refusal's code."""
    channel = grpc.secure_channel(addr, channel_credentials) if channel_credentials else grpc.insecure_channel(addr)
    with channel:
        call = channel.unary_unary("/fleetscope.v1.Ingest/Register", request_serializer=pb.RegisterRequest.SerializeToString,
                                   response_deserializer=pb.RegisterResponse.FromString)
        req = pb.RegisterRequest(agent_id=agent_id, boot_id="boot-1", name=name or agent_id[:8], hostname="h", labels=labels or {})
        try:
            call(req, metadata=metadata(token=token, agent_id=agent_id, key=key), timeout=10)
            return grpc.StatusCode.OK
        except grpc.RpcError as exc:
            return exc.code()


def gpu_batch(agent_id: str, seq: int, *, rows: int = 3, boot_id: str = "boot-1") -> bytes:
    b = pb.Batch(agent_id=agent_id, boot_id=boot_id, seq=seq, created_ns=time.time_ns())
    fill_gpu(b.gpu, [GpuSample(ts_ns=time.time_ns() + i, gpu_index=0, util_gpu_percent=1.0, energy_j=1e6 + seq * 10 + i)
                     for i in range(rows)])
    return with_sent_ns(b.SerializeToString(), time.time_ns())


def stream(addr: str, batches: list[bytes], *, token: str = "", agent_id: str = "", key: str = "") -> tuple[list[pb.Ack], grpc.StatusCode]:
    with grpc.insecure_channel(addr) as channel:
        call = channel.stream_stream("/fleetscope.v1.Ingest/Stream", request_serializer=lambda b: b,
                                     response_deserializer=pb.Ack.FromString)
        acks: list[pb.Ack] = []
        try:
            for ack in call(iter(batches), metadata=metadata(token=token, agent_id=agent_id, key=key), timeout=15):
                acks.append(ack)
            return acks, grpc.StatusCode.OK
        except grpc.RpcError as exc:
            return acks, exc.code()


def count(db_url: str, sql: str, **params: object) -> int:
    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(sql), params).scalar_one())
    finally:
        engine.dispose()


def new_token(db_url: str, fleet: str = "drones", *, expires_ns: int | None = None) -> tuple[str, str]:
    engine = make_engine(db_url)
    try:
        row, token = create_enrolment_token(engine, fleet=fleet, now_ns=time.time_ns(), expires_ns=expires_ns)
    finally:
        engine.dispose()
    return row.id, token


def fleet_agent(tmp_path: Path, addr: str, sampler: object, *, name: str, token: str, fleet: str):  # type: ignore[no-untyped-def]
    """``make_agent``'s agent with the label fleet=``fleet``."""
    from fleetscope.agent.daemon.runner import Agent, AgentSettings

    settings = AgentSettings(collectors=(addr,), spool_dir=tmp_path / f"spool-{name}", token=token, name=name,
                             labels={"fleet": fleet}, interval_s=0.05, batch_interval_s=0.1, backoff_initial_s=0.1,
                             backoff_max_s=1.0, drain_timeout_s=10.0)
    return Agent(settings, samplers=[sampler], inventory=pb.Inventory(cpu_model="test"), kind=pb.DEVICE_KIND_SERVER)


# ---------------------------------------------------------------- TLS


def test_certs_init_writes_a_ca_collector_and_agent_files_with_private_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "certs"
    assert main(["certs", "init", "--dir", str(d), "--host", "collector.example", "--host", "10.0.0.7", "--agent", "drone-1"]) == 0
    out = capsys.readouterr().out
    for f in ("ca.pem", "ca.key", "collector.pem", "collector.key", "agent-drone-1.pem", "agent-drone-1.key"):
        assert (d / f).exists(), f
    for f in ("ca.key", "collector.key", "agent-drone-1.key"):
        assert stat.S_IMODE((d / f).stat().st_mode) == 0o600, f
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((d / "collector.pem").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {"collector.example", "localhost"}
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {"10.0.0.7", "127.0.0.1"}
    assert "--tls-cert" in out
    # Run again: the CA is reused (agents added later stay valid), existing files are kept.
    ca_before = (d / "ca.pem").read_bytes()
    assert main(["certs", "init", "--dir", str(d), "--agent", "drone-2"]) == 0
    assert (d / "ca.pem").read_bytes() == ca_before and (d / "agent-drone-2.pem").exists()
    assert main(["certs", "init", "--dir", str(d), "--agent", "../evil"]) == 2


@pytest.mark.timeout(120)
def test_tls_agent_streams_end_to_end_through_certs_init_and_plaintext_stores_nothing(
    tmp_path: Path, db_url: str, collector_process, capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    d = tmp_path / "certs"
    assert main(["certs", "init", "--dir", str(d)]) == 0
    capsys.readouterr()
    c = collector_process(db_url, extra_args=("--tls-cert", str(d / "collector.pem"), "--tls-key", str(d / "collector.key"))).start()
    plain = make_agent(tmp_path, [c.address], CountingSampler(total=300, per_tick=30), name="plain")
    sampler = CountingSampler(total=500, per_tick=50)
    agent = make_agent(tmp_path, [c.address], sampler, tls=ChannelTLS(ca=d / "ca.pem"))
    plain.start()
    agent.start()
    try:
        wait_until(lambda: len(gpu_sequence_numbers(db_url, "dev-1")) >= 500, 60, message="the TLS agent's rows stored")
        assert sorted(gpu_sequence_numbers(db_url, "dev-1")) == list(range(500))
        wait_until(lambda: "TLS" in plain.uplink.status.last_error, 20, message="the plaintext agent's clear error")
        assert plain.uplink.status.acked == 0
        assert count(db_url, "SELECT count(*) FROM devices WHERE name = 'plain'") == 0
    finally:
        plain.stop()
        agent.stop()


def _tls_collector(db_url: str, certs: Path, **kw: object) -> Collector:
    return start_collector(db_url, tls=ServerTLS(certs / "collector.pem", certs / "collector.key", **kw))  # type: ignore[arg-type]


@pytest.mark.server
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_wrong_ca_expired_certificate_and_mtls_without_client_cert_are_refused(tmp_path: Path, db_url: str, certs: Path) -> None:
    ok = grpc.ssl_channel_credentials((certs / "ca.pem").read_bytes())
    other = tmp_path / "other"
    init_certs(other)
    wrong = grpc.ssl_channel_credentials((other / "ca.pem").read_bytes())
    c = _tls_collector(db_url, certs)
    try:
        assert register(address(c), "wrong-ca", token=STATIC, channel_credentials=wrong) == grpc.StatusCode.UNAVAILABLE
        assert register(address(c), "plaintext", token=STATIC) == grpc.StatusCode.UNAVAILABLE
        assert register(address(c), "good", token=STATIC, channel_credentials=ok) == grpc.StatusCode.OK  # served meanwhile
    finally:
        c.stop()
    assert count(db_url, "SELECT count(*) FROM devices") == 1

    # A collector whose certificate expired yesterday: no agent trusts it.
    ca_cert, ca_key, _ = load_or_create_ca(certs)
    now = dt.datetime.now(dt.timezone.utc)
    cert, key = issue_certificate(ca_cert, ca_key, common_name="localhost", hosts=["127.0.0.1", "localhost"],
                                  not_before=now - dt.timedelta(days=30), not_after=now - dt.timedelta(days=1))
    (tmp_path / "expired.pem").write_bytes(cert)
    (tmp_path / "expired.key").write_bytes(key)
    c = start_collector(db_url, tls=ServerTLS(tmp_path / "expired.pem", tmp_path / "expired.key"))
    try:
        assert register(address(c), "expired", token=STATIC, channel_credentials=ok) == grpc.StatusCode.UNAVAILABLE
    finally:
        c.stop()

    # Mutual TLS: without a client certificate, refused; with one the CA signed, served.
    c = _tls_collector(db_url, certs, client_ca=certs / "ca.pem")
    try:
        assert register(address(c), "no-client-cert", token=STATIC, channel_credentials=ok) == grpc.StatusCode.UNAVAILABLE
        other_client = issue_certificate(*load_or_create_ca(other)[:2], common_name="intruder", client=True)
        intruder = grpc.ssl_channel_credentials((certs / "ca.pem").read_bytes(), other_client[1], other_client[0])
        assert register(address(c), "intruder", token=STATIC, channel_credentials=intruder) == grpc.StatusCode.UNAVAILABLE
        mtls = ChannelTLS(ca=certs / "ca.pem", cert=certs / "agent-a1.pem", key=certs / "agent-a1.key")
        assert register(address(c), "with-cert", token=STATIC, channel_credentials=mtls.credentials()) == grpc.StatusCode.OK
    finally:
        c.stop()
    assert count(db_url, "SELECT count(*) FROM devices WHERE agent_id IN ('wrong-ca', 'plaintext', 'expired', 'no-client-cert', 'intruder')") == 0


def test_collector_refuses_unusable_tls_files_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "junk.pem").write_text("not a certificate")
    db = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(SystemExit) as exc:
        main(["collector", "--db", db, "--tls-cert", str(tmp_path / "junk.pem"), "--tls-key", str(tmp_path / "junk.pem")])
    assert exc.value.code == 2
    assert "junk.pem: not a PEM certificate" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["agent", "--collector", "127.0.0.1:1", "--spool", str(tmp_path / "s"), "--tls-ca", str(tmp_path / "missing.pem")])
    assert exc.value.code == 2
    assert "missing.pem: cannot read the CA certificate" in capsys.readouterr().err


# ---------------------------------------------------------------- enrolment and identity


@pytest.mark.server
def test_enrolment_gives_the_agent_its_own_credential_which_outlives_the_token(tmp_path: Path, db_url: str, running: Collector) -> None:
    token_id, token = new_token(db_url, "drones")
    sampler = CountingSampler(total=200, per_tick=50)
    agent = fleet_agent(tmp_path, address(running), sampler, name="drone-1", token=token, fleet="drones")
    agent.start()
    try:
        wait_until(lambda: len(gpu_sequence_numbers(db_url, "drone-1")) >= 200, 30, message="stored")
    finally:
        agent.stop()
    key_file = agent.settings.spool_dir / "device_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert count(db_url, "SELECT count(*) FROM device_credentials WHERE agent_id = :a AND fleet = 'drones' AND via = :v",
                 a=agent.agent_id, v=f"token:{token_id}") == 1
    assert count(db_url, "SELECT uses FROM enrolment_tokens WHERE id = :i", i=token_id) == 1
    # Neither the key nor the token is stored, only digests.
    key = key_file.read_text().strip()
    assert count(db_url, "SELECT count(*) FROM device_credentials WHERE key_sha256 = :k", k=key) == 0
    assert count(db_url, "SELECT count(*) FROM enrolment_tokens WHERE secret_sha256 = :s", s=token.split(".")[2]) == 0
    # The token is revoked: the enrolled agent goes on with its own credential.
    engine = make_engine(db_url)
    revoke_enrolment_token(engine, token_id, now_ns=time.time_ns())
    engine.dispose()
    again = CountingSampler(total=100, per_tick=50)
    agent2 = fleet_agent(tmp_path, address(running), again, name="drone-1", token=token, fleet="drones")
    assert agent2.agent_id == agent.agent_id
    agent2.start()
    try:
        wait_until(lambda: len(gpu_sequence_numbers(db_url, "drone-1")) >= 300, 30, message="stored after the token's revocation")
    finally:
        agent2.stop()
    assert len(gpu_sequence_numbers(db_url, "drone-1")) == 300


@pytest.mark.server
def test_revoked_expired_and_foreign_fleet_tokens_cannot_enrol(db_url: str, running: Collector) -> None:
    addr = address(running)
    revoked_id, revoked = new_token(db_url, "drones")
    engine = make_engine(db_url)
    revoke_enrolment_token(engine, revoked_id, now_ns=time.time_ns())
    engine.dispose()
    _, expired = new_token(db_url, "drones", expires_ns=time.time_ns() - 1)
    _, servers = new_token(db_url, "servers")
    assert register(addr, "r1", token=revoked, key="k" * 43) == grpc.StatusCode.UNAUTHENTICATED
    assert register(addr, "e1", token=expired, key="k" * 43) == grpc.StatusCode.UNAUTHENTICATED
    forged = revoked.rsplit(".", 1)[0] + ".forged-secret"
    assert register(addr, "f1", token=forged, key="k" * 43) == grpc.StatusCode.UNAUTHENTICATED
    assert register(addr, "x1", token=servers, key="k" * 43, labels={"fleet": "drones"}) == grpc.StatusCode.PERMISSION_DENIED
    assert register(addr, "n1", token=servers, key="k" * 43) == grpc.StatusCode.OK  # served meanwhile
    assert register(addr, "n1", token="", key="k" * 43, labels={"fleet": "drones"}) == grpc.StatusCode.PERMISSION_DENIED
    assert count(db_url, "SELECT count(*) FROM devices") == 1
    assert count(db_url, "SELECT count(*) FROM device_credentials") == 1


@pytest.mark.server
@pytest.mark.timeout(120)
def test_an_enrolled_agent_claiming_anothers_id_is_refused_and_the_first_ones_data_arrives_exactly_once(
    tmp_path: Path, db_url: str, running: Collector
) -> None:
    """The takeover of the issue: a second client holding the fleet token registers as the first
    device and claims its next 300 sequence numbers. Refused, nothing stored, and the first
    device's data keeps arriving exactly once."""
    addr = address(running)
    _, token = new_token(db_url, "drones")
    sampler = CountingSampler(total=3000, per_tick=30)
    victim = fleet_agent(tmp_path, addr, sampler, name="victim", token=token, fleet="drones")
    victim.start()
    try:
        wait_until(lambda: victim.uplink.status.acked >= 3, 30, message="the victim streaming")
        # A second agent, enrolled with the same token in its own right.
        attacker_key = "attacker-key-" + uuid.uuid4().hex
        assert register(addr, "attacker-id", token=token, key=attacker_key, labels={"fleet": "drones"}) == grpc.StatusCode.OK
        # It claims the victim's id: with its own key, with the token again, with the static token, with none.
        assert register(addr, victim.agent_id, token=token, key=attacker_key, name="victim") == grpc.StatusCode.PERMISSION_DENIED
        assert register(addr, victim.agent_id, token=STATIC, name="victim") == grpc.StatusCode.PERMISSION_DENIED
        assert register(addr, victim.agent_id, token=token, key=attacker_key, name="victim", labels={"owner": "attacker"}) \
            == grpc.StatusCode.PERMISSION_DENIED
        # Its stream, opened with its own credential, sends batches as the victim: the next 300 seqs.
        start = victim.uplink.status.acked + 20
        batches = [gpu_batch(victim.agent_id, s, boot_id=victim.boot_id) for s in range(start, start + 300)]
        acks, code = stream(addr, batches, agent_id="attacker-id", key=attacker_key)
        assert code == grpc.StatusCode.PERMISSION_DENIED and acks == []
        # The same through a key-less stream holding the static fleet token.
        acks, code = stream(addr, batches, token=STATIC)
        assert code == grpc.StatusCode.PERMISSION_DENIED and acks == []
        # A key for the victim's id that is not the victim's.
        acks, code = stream(addr, batches, agent_id=victim.agent_id, key=attacker_key)
        assert code == grpc.StatusCode.PERMISSION_DENIED and acks == []
        wait_until(lambda: len(gpu_sequence_numbers(db_url, "victim")) >= 3000, 90, message="the victim's data stored")
    finally:
        victim.stop()
    assert sorted(gpu_sequence_numbers(db_url, "victim")) == list(range(3000))  # every row, exactly once
    energy = stored_samples(db_url, "gpu", columns=("energy_j",)).values["energy_j"]
    assert int((energy >= 1_000_000).sum()) == 0  # nothing of the attacker's
    assert count(db_url, "SELECT count(*) FROM devices WHERE agent_id = :a AND name = 'victim'", a=victim.agent_id) == 1
    assert count(db_url, "SELECT count(*) FROM streams WHERE agent_id = :a", a=victim.agent_id) == 1
    assert victim.uplink.status.rejected == 0


@pytest.mark.server
def test_replayed_credentials_are_refused(db_url: str, running: Collector) -> None:
    addr = address(running)
    _, token = new_token(db_url, "drones")
    key_a = "key-a-" + uuid.uuid4().hex
    assert register(addr, "agent-a", token=token, key=key_a) == grpc.StatusCode.OK
    # The enrolment replayed with another key for the same agent id.
    assert register(addr, "agent-a", token=token, key="key-b") == grpc.StatusCode.PERMISSION_DENIED
    # A's key presented for another agent id (the header and the request disagree).
    with grpc.insecure_channel(addr) as channel:
        call = channel.unary_unary("/fleetscope.v1.Ingest/Register", request_serializer=pb.RegisterRequest.SerializeToString,
                                   response_deserializer=pb.RegisterResponse.FromString)
        with pytest.raises(grpc.RpcError) as exc:
            call(pb.RegisterRequest(agent_id="agent-b", boot_id="b", name="b"), metadata=metadata(agent_id="agent-a", key=key_a), timeout=10)
        assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # A's own key works (idempotent: a lost reply never strands an agent), then A is revoked and its key replayed.
    assert register(addr, "agent-a", key=key_a) == grpc.StatusCode.OK
    assert main(["device", "revoke", "agent-a", "--db", db_url]) == 0
    assert register(addr, "agent-a", key=key_a) == grpc.StatusCode.PERMISSION_DENIED
    assert register(addr, "agent-a", token=token, key=key_a) == grpc.StatusCode.PERMISSION_DENIED
    assert register(addr, "agent-a", token=STATIC) == grpc.StatusCode.PERMISSION_DENIED
    acks, code = stream(addr, [gpu_batch("agent-a", 1)], agent_id="agent-a", key=key_a)
    assert code == grpc.StatusCode.PERMISSION_DENIED and acks == []
    assert sample_count(db_url, "gpu") == 0


@pytest.mark.server
@pytest.mark.timeout(120)
def test_device_revoke_closes_the_open_stream_at_once_and_others_go_on(
    tmp_path: Path, db_url: str, running: Collector, capsys: pytest.CaptureFixture[str]
) -> None:
    addr = address(running)
    _, token = new_token(db_url, "drones")
    bad_sampler, good_sampler = CountingSampler(total=100_000, per_tick=10), CountingSampler(total=100_000, per_tick=10)
    bad = make_agent(tmp_path, [addr], bad_sampler, name="stolen", token=token)
    good = make_agent(tmp_path, [addr], good_sampler, name="good", token=token)
    bad.start()
    good.start()
    try:
        wait_until(lambda: bad.uplink.status.acked >= 3 and good.uplink.status.acked >= 3, 30, message="both streaming")
        assert main(["device", "revoke", "stolen", "--db", db_url]) == 0
        assert "revoked agent" in capsys.readouterr().out
        revoked_at = time.monotonic()
        wait_until(lambda: "PERMISSION_DENIED" in bad.uplink.status.last_error, 10, interval_s=0.05, message="the stream closed")
        assert time.monotonic() - revoked_at < 3.0
        # Batches the collector took before it closed the stream may still be in its writer's
        # queue (CI: 250 rows stored when the agent saw the close, 280 a moment later): once those
        # are written, nothing more may come.
        counts = [len(gpu_sequence_numbers(db_url, "stolen"))]

        def settled() -> bool:
            counts.append(len(gpu_sequence_numbers(db_url, "stolen")))
            return counts[-1] == counts[-2]

        wait_until(settled, 10, interval_s=0.5, message="the batches taken before the close written")
        stored = counts[-1]
        good_before = good.uplink.status.acked
        time.sleep(1.5)
        assert len(gpu_sequence_numbers(db_url, "stolen")) == stored  # nothing more from it
        assert good.uplink.status.acked > good_before  # the rest of the fleet unaffected
    finally:
        bad.stop()
        good.stop()
    assert main(["device", "revoke", "no-such-device", "--db", db_url]) == 1


@pytest.mark.server
def test_static_tokens_still_work_and_bind_the_agent_id_to_its_first_key(tmp_path: Path, db_url: str, running: Collector) -> None:
    addr = address(running)
    # A key-less client (an older agent) with the static token: let in, for ids nobody enrolled.
    assert register(addr, "old-agent", token=STATIC) == grpc.StatusCode.OK
    acks, code = stream(addr, [gpu_batch("old-agent", 1)], token=STATIC)
    assert code == grpc.StatusCode.OK and [a.status for a in acks] == [pb.Ack.STATUS_STORED]
    # A key-less stream may not switch agent ids half-way.
    assert register(addr, "old-agent-2", token=STATIC) == grpc.StatusCode.OK
    acks, code = stream(addr, [gpu_batch("old-agent", 2), gpu_batch("old-agent-2", 1)], token=STATIC)
    assert code == grpc.StatusCode.PERMISSION_DENIED and len(acks) <= 1
    # A new agent with the static token: bound to its own key at first registration.
    sampler = CountingSampler(total=100, per_tick=50)
    agent = make_agent(tmp_path, [addr], sampler, name="static-1")
    agent.start()
    try:
        wait_until(lambda: len(gpu_sequence_numbers(db_url, "static-1")) >= 100, 30, message="stored")
    finally:
        agent.stop()
    assert count(db_url, "SELECT count(*) FROM device_credentials WHERE agent_id = :a AND via = 'static'", a=agent.agent_id) == 1
    assert register(addr, agent.agent_id, token=STATIC) == grpc.StatusCode.PERMISSION_DENIED
    assert register(addr, agent.agent_id, token=STATIC, key="another") == grpc.StatusCode.PERMISSION_DENIED
    assert register(addr, "intruder", token="wrong-token", key="k") == grpc.StatusCode.UNAUTHENTICATED


def test_token_cli_create_list_revoke(tmp_path: Path, db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "create", "--fleet", "drones", "--expires", "30d", "--db", db_url]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    assert token.startswith("fse1.")
    token_id = token.split(".")[1]
    assert main(["token", "list", "--db", db_url]) == 0
    out = capsys.readouterr().out
    assert token_id in out and "active" in out and token.split(".")[2] not in out
    assert main(["token", "revoke", token_id, "--db", db_url]) == 0
    assert main(["token", "list", "--db", db_url]) == 0
    assert "revoked" in capsys.readouterr().out
    assert main(["token", "revoke", "nope", "--db", db_url]) == 1
    with pytest.raises(SystemExit) as exc:
        main(["token", "create", "--fleet", "x", "--expires", "soon", "--db", db_url])
    assert exc.value.code == 2


def test_token_file_and_the_warning_for_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetscope.agent.daemon.credentials import agent_credentials
    from fleetscope.cli import build_parser

    monkeypatch.delenv("FLEETSCOPE_TOKEN", raising=False)
    f = tmp_path / "token"
    f.write_text("\nfse1.abc.def\n")
    args = build_parser().parse_args(["agent", "--collector", "x:1", "--token-file", str(f)])
    assert agent_credentials(args)[0] == "fse1.abc.def"
    assert "--token shows" not in capsys.readouterr().err
    args = build_parser().parse_args(["agent", "--collector", "x:1", "--token", "secret"])
    assert agent_credentials(args)[0] == "secret"
    assert "/proc/PID/cmdline" in capsys.readouterr().err
    monkeypatch.setenv("FLEETSCOPE_TOKEN", "from-env")
    args = build_parser().parse_args(["agent", "--collector", "x:1"])
    assert agent_credentials(args)[0] == "from-env"
    assert "/proc/PID/cmdline" not in capsys.readouterr().err


def test_device_key_is_made_once_and_private(tmp_path: Path) -> None:
    os.umask(0o022)
    key = load_or_create_device_key(tmp_path / "state")
    assert load_or_create_device_key(tmp_path / "state") == key and len(key) >= 40
    assert stat.S_IMODE((tmp_path / "state" / "device_key").stat().st_mode) == 0o600
    assert load_or_create_device_key(tmp_path / "other") != key


# ---------------------------------------------------------------- hostile text


@pytest.mark.server
def test_sql_looking_strings_in_every_text_field_are_stored_verbatim(tmp_path: Path, db_url: str, running: Collector,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    addr = address(running)
    assert main(["token", "create", "--fleet", SQLISH, "--comment", SQLISH, "--db", db_url]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    key = "k-" + uuid.uuid4().hex
    agent_id = "a'; DELETE FROM devices; --"
    with grpc.insecure_channel(addr) as channel:
        reg = channel.unary_unary("/fleetscope.v1.Ingest/Register", request_serializer=pb.RegisterRequest.SerializeToString,
                                  response_deserializer=pb.RegisterResponse.FromString)
        req = pb.RegisterRequest(agent_id=agent_id, boot_id=SQLISH[:60], name=SQLISH, hostname=SQLISH, agent_version=SQLISH,
                                 labels={SQLISH: SQLISH, "fleet": SQLISH}, capabilities=[SQLISH])
        req.inventory.cpu_model = SQLISH
        reg(req, metadata=metadata(token=token, agent_id=agent_id, key=key), timeout=10)
    b = pb.Batch(agent_id=agent_id, boot_id=SQLISH[:60], seq=1, created_ns=time.time_ns())
    b.logs.add(ts_ns=time.time_ns(), level=pb.LEVEL_ERROR, source=SQLISH, message=SQLISH)
    b.incidents.add(ts_ns=time.time_ns(), kind="cuda_oom", severity=pb.LEVEL_ERROR, title=SQLISH, source=SQLISH, excerpt=SQLISH)
    b.metrics.add(ts_ns=time.time_ns(), name=SQLISH, value=1.0, labels={SQLISH: SQLISH})
    acks, code = stream(addr, [with_sent_ns(b.SerializeToString(), time.time_ns())], agent_id=agent_id, key=key)
    assert code == grpc.StatusCode.OK and [a.status for a in acks] == [pb.Ack.STATUS_STORED], acks
    assert count(db_url, "SELECT count(*) FROM devices WHERE name = :n AND hostname = :n AND agent_id = :a", n=SQLISH, a=agent_id) == 1
    assert count(db_url, "SELECT count(*) FROM log_events WHERE message = :n", n=SQLISH) == 1
    assert count(db_url, "SELECT count(*) FROM incidents WHERE title = :n", n=SQLISH) == 1
    assert count(db_url, "SELECT count(*) FROM metric_points WHERE name = :n", n=SQLISH) == 1
    assert count(db_url, "SELECT count(*) FROM device_credentials WHERE fleet = :n", n=SQLISH) == 1
    assert count(db_url, "SELECT count(*) FROM enrolment_tokens WHERE fleet = :n AND comment = :n", n=SQLISH) == 1
    assert main(["device", "revoke", SQLISH, "--db", db_url]) == 0
    assert main(["token", "list", "--db", db_url]) == 0
    assert table_count(db_url, "devices") == 1


# ---------------------------------------------------------------- limits per agent


def test_limiter_throttles_by_rate_and_caps_series_and_registrations() -> None:
    now = [0.0]
    lim = AgentLimiter(AgentLimits(batches_per_s=10, bytes_per_s=1000, burst_s=1.0, max_series=3, registrations_per_min=6),
                       clock=lambda: now[0])
    assert all(lim.batch_delay("noisy", 10) == 0 for _ in range(10))
    assert lim.batch_delay("noisy", 10) == pytest.approx(0.1)
    assert lim.batch_delay("quiet", 10) == 0  # another agent: its own buckets
    assert lim.batch_delay("big", 5000) == pytest.approx(4.0)  # bytes: 4,000 over a 1,000/s rate
    b = pb.Batch(agent_id="noisy")
    for i in range(5):
        b.metrics.add(name=f"m{i}", value=1.0, ts_ns=1)
    b.latency.add(name="op", start_ns=1, end_ns=2)
    assert lim.trim_series(b) == 3 and [m.name for m in b.metrics] == ["m0", "m1"] and [h.name for h in b.latency] == ["op"]
    b2 = pb.Batch(agent_id="noisy")
    b2.metrics.add(name="m1", value=2.0, ts_ns=2)
    assert lim.trim_series(b2) == 0  # known series go on
    for _ in range(6):  # only registrations that passed the identity check count
        assert lim.registration_retry_after("r") == 0
        lim.registered("r")
    assert lim.registration_retry_after("r") > 0
    assert lim.registration_retry_after("r") > 0  # asking again costs nothing more
    report = lim.report()
    assert set(report) == {"noisy", "big", "r"} and report["noisy"].series_dropped == 3


@pytest.mark.server
@pytest.mark.timeout(120)
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_noisy_agent_is_throttled_and_the_rest_of_the_fleet_is_not(tmp_path: Path, db_url: str) -> None:
    c = start_collector(db_url, agent_limits=AgentLimits(batches_per_s=2, burst_s=1.0, max_series=5, registrations_per_min=600))
    addr = address(c)
    try:
        assert register(addr, "noisy", token=STATIC) == grpc.StatusCode.OK
        assert register(addr, "quiet", token=STATIC) == grpc.StatusCode.OK
        noisy = [gpu_batch("noisy", s) for s in range(1, 11)]
        started = time.monotonic()
        import threading

        result: dict[str, object] = {}
        t = threading.Thread(target=lambda: result.update(noisy=stream(addr, noisy, token=STATIC)))
        t.start()
        time.sleep(0.3)
        q0 = time.monotonic()
        acks, code = stream(addr, [gpu_batch("quiet", 1), gpu_batch("quiet", 2)], token=STATIC)
        assert code == grpc.StatusCode.OK and len(acks) == 2
        assert time.monotonic() - q0 < 2.0  # not held back by the noisy one
        t.join(30)
        acks_n, code_n = result["noisy"]  # type: ignore[misc]
        assert code_n == grpc.StatusCode.OK and len(acks_n) == 10  # slowed, nothing lost
        assert time.monotonic() - started >= 3.0  # 10 batches at 2/s after a burst of 2
        assert c._service is not None and c._service.limiter.report()["noisy"].throttled >= 5
        # Series beyond the cap are dropped from the batch, the rest of it stored.
        b = pb.Batch(agent_id="quiet", boot_id="boot-1", seq=3, created_ns=time.time_ns())
        for i in range(8):
            b.metrics.add(name=f"series-{i}", value=1.0, ts_ns=time.time_ns())
        acks, code = stream(addr, [with_sent_ns(b.SerializeToString(), time.time_ns())], token=STATIC)
        assert code == grpc.StatusCode.OK and acks[0].status == pb.Ack.STATUS_STORED
    finally:
        c.stop()
    assert count(db_url, "SELECT count(*) FROM metric_points") == 5


@pytest.mark.server
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_registrations_beyond_the_limit_get_resource_exhausted_with_retry_after(db_url: str) -> None:
    c = start_collector(db_url, agent_limits=AgentLimits(registrations_per_min=2))
    try:
        codes = [register(address(c), "flappy", token=STATIC) for _ in range(4)]
        assert codes[:2] == [grpc.StatusCode.OK] * 2 and codes[2:] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2
        assert register(address(c), "calm", token=STATIC) == grpc.StatusCode.OK
    finally:
        c.stop()


@pytest.mark.server
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_status_asks_a_tls_collector_over_tls(tmp_path: Path, db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from fleetscope.collector.commands.status import collector_health

    certs = tmp_path / "certs"
    init_certs(certs)
    c = _tls_collector(db_url, certs)
    try:
        address = f"127.0.0.1:{c.port}"
        assert collector_health(address, 3.0, tls_ca=certs / "ca.pem") == "SERVING"
        assert collector_health(address, 3.0).startswith("unreachable"), "a plaintext check gets no answer"
        capsys.readouterr()
        assert main(["status", "--db", db_url, "--collector", address, "--tls-ca", str(certs / "nope.pem")]) == 2
        err = capsys.readouterr().err
        assert "cannot read the CA certificate" in err and "Traceback" not in err
    finally:
        c.stop()
