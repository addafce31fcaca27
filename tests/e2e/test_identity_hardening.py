"""Identity, tried through real processes: a lost drone wiped and restarted with its token file,
revocations made by hosts whose clocks are off, a flood of registrations claiming a victim's id,
one enrolment token minting identities and flooding, agents with the wrong client certificate,
and a collector started without a token.

Real ``fleetscope collector`` and ``fleetscope agent`` processes, real gRPC over loopback, real
SQLite and PostgreSQL where the item is about storage; the attackers are raw gRPC clients.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from sqlalchemy import create_engine, text

from fleetscope.agent.daemon.uplink import with_sent_ns
from fleetscope.cli import main
from fleetscope.collector.commands.certs import init_certs
from fleetscope.collector.storage.engine import normalise_url
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.conftest import wait_until
from tests.helpers import sample_count

CLI = [sys.executable, "-m", "fleetscope.cli"]
REGISTER = "/fleetscope.v1.Ingest/Register"
STREAM = "/fleetscope.v1.Ingest/Stream"


# ---------------------------------------------------------------- helpers


def scalar(db_url: str, sql: str, **params: object) -> int:
    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(sql), params).scalar_one() or 0)
    finally:
        engine.dispose()


def host_rows(db_url: str, name: str) -> int:
    return sample_count(db_url, "host", device=name)


def make_token(db_url: str, capsys: pytest.CaptureFixture[str], *flags: str, fleet: str = "drones") -> str:
    assert main(["token", "create", "--fleet", fleet, *flags, "--db", db_url]) == 0
    return capsys.readouterr().out.strip().splitlines()[-1]


class AgentProcess:
    """``fleetscope agent`` in a subprocess, its state (agent id, device key, spool) in ``state``."""

    def __init__(self, tmp_path: Path, address: str, name: str, *, token: str = "", extra: tuple[str, ...] = ()) -> None:
        self.state = tmp_path / f"state-{name}"
        self.log = tmp_path / f"agent-{name}.log"
        self.args = [*CLI, "agent", "--collector", address, "--name", name, "--spool", str(self.state), "--no-gpu",
                     "--no-kernel-log", "--interval", "0.1s", "--batch-interval", "0.2s", *extra]
        if token:
            token_file = tmp_path / f"token-{name}"
            token_file.write_text(token + "\n")
            token_file.chmod(0o600)
            self.args += ["--token-file", str(token_file)]
        self.proc: subprocess.Popen | None = None

    def start(self) -> AgentProcess:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def agent_id(self) -> str:
        return (self.state / "agent_id").read_text().strip()


@pytest.fixture
def agents() -> Iterator[list[AgentProcess]]:
    made: list[AgentProcess] = []
    yield made
    for a in made:
        a.stop()


def register_call(address: str, agent_id: str, *, key: str = "", token: str = "", name: str = "",
                  gpu_uuid: str = "") -> grpc.RpcError | None:
    """One raw Register; None when it passed, else the error (with its code and trailers)."""
    md: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
    if key:
        md += (("fleetscope-agent-id", agent_id), ("fleetscope-device-key", key))
    req = pb.RegisterRequest(agent_id=agent_id, boot_id="boot-1", name=name or agent_id[:12], hostname="h")
    if gpu_uuid:
        req.inventory.gpus.add(index=0, name="Orin", uuid=gpu_uuid)
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(REGISTER, request_serializer=pb.RegisterRequest.SerializeToString,
                                   response_deserializer=pb.RegisterResponse.FromString)
        try:
            call(req, metadata=md, timeout=10)
            return None
        except grpc.RpcError as exc:
            return exc


def code_of(result: grpc.RpcError | None) -> grpc.StatusCode:
    return grpc.StatusCode.OK if result is None else result.code()  # type: ignore[attr-defined]


def revoke_with_clock_off(db_url: str, name: str, offset_s: float) -> subprocess.CompletedProcess:
    """``fleetscope device revoke NAME`` in a process whose clock is ``offset_s`` off (an operator's laptop)."""
    code = ("import sys, time; real = time.time_ns; time.time_ns = lambda: real() + int(%r * 1e9); "
            "from fleetscope.cli import main; sys.exit(main(sys.argv[1:]))") % offset_s
    return subprocess.run([sys.executable, "-c", code, "device", "revoke", name, "--db", db_url],
                          capture_output=True, text=True, timeout=60)


def still_growing(db_url: str, name: str, seconds: float = 2.0) -> bool:
    before = host_rows(db_url, name)
    time.sleep(seconds)
    return host_rows(db_url, name) > before


# ---------------------------------------------------------------- 28.1: a lost drone stays out


@pytest.mark.timeout(180)
def test_a_revoked_drone_wiped_and_restarted_with_its_token_file_stays_out_until_allowed(
    tmp_path: Path, db_url: str, collector_process, agents: list[AgentProcess], capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    token = make_token(db_url, capsys)
    c = collector_process(db_url, token="").start()
    drone = AgentProcess(tmp_path, c.address, "drone-7", token=token).start()
    agents.append(drone)
    wait_until(lambda: host_rows(db_url, "drone-7") >= 5, 60, message="the drone streaming")
    old_id = drone.agent_id()

    # The operator's steps for a lost drone (docs/security.md): revoke the device, then the token it holds.
    assert main(["device", "revoke", "drone-7", "--db", db_url]) == 0
    out = capsys.readouterr().out
    assert "device allow drone-7" in out and "token revoke" in out
    wait_until(lambda: not still_growing(db_url, "drone-7", 1.0), 10, message="the drone's stream closed")

    # The thief wipes the state folder and starts it again with the same token file: a new
    # agent id, but the same device: refused, nothing stored, within the 10 s and after.
    drone.stop()
    shutil.rmtree(drone.state)
    stored = host_rows(db_url, "drone-7")
    drone.start()
    wait_until(lambda: (drone.state / "agent_id").exists(), 30, message="the wiped drone started")
    time.sleep(10)
    assert drone.agent_id() != old_id
    assert host_rows(db_url, "drone-7") == stored
    assert scalar(db_url, "SELECT count(*) FROM devices WHERE name = 'drone-7'") == 1
    assert scalar(db_url, "SELECT count(*) FROM device_credentials WHERE agent_id = :a", a=drone.agent_id()) == 0
    assert "device allow drone-7" in drone.output()  # the agent says why, and what lets it back

    # Under another name, the same GPU is the same device.
    gpu = "GPU-" + uuid.uuid4().hex
    assert register_call(c.address, "orin-1", key="k1-" + uuid.uuid4().hex, token=token, name="orin-1", gpu_uuid=gpu) is None
    assert main(["device", "revoke", "orin-1", "--db", db_url]) == 0
    renamed = register_call(c.address, "orin-2", key="k2-" + uuid.uuid4().hex, token=token, name="renamed", gpu_uuid=gpu)
    assert code_of(renamed) == grpc.StatusCode.PERMISSION_DENIED and "was revoked" in renamed.details()  # type: ignore[union-attr]

    # The drone is found again: the operator allows it back; it enrols as a new agent id, the old one stays revoked.
    assert main(["device", "allow", "drone-7", "--db", db_url]) == 0
    drone.stop()
    drone.start()
    wait_until(lambda: host_rows(db_url, "drone-7") > stored, 60, message="the allowed drone streaming again")
    assert scalar(db_url, "SELECT count(*) FROM device_credentials WHERE agent_id = :a AND revoked_ns IS NOT NULL", a=old_id) == 1
    assert main(["device", "allow", "nobody", "--db", db_url]) == 1


# ---------------------------------------------------------------- 28.2: revocations whatever the clocks


@pytest.mark.timeout(180)
def test_revocations_reach_every_collector_within_a_second_whatever_the_revoking_hosts_clock(
    tmp_path: Path, db_url: str, collector_process, agents: list[AgentProcess], capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    token = make_token(db_url, capsys)
    c1 = collector_process(db_url, token="").start()
    c2 = collector_process(db_url, token="").start()
    ahead = AgentProcess(tmp_path, c1.address, "ahead", token=token).start()
    behind = AgentProcess(tmp_path, c2.address, "behind", token=token).start()
    bystander = AgentProcess(tmp_path, c2.address, "bystander", token=token).start()
    agents.extend([ahead, behind, bystander])
    for name in ("ahead", "behind", "bystander"):
        wait_until(lambda name=name: host_rows(db_url, name) >= 5, 60, message=f"{name} streaming")

    # A revocation stamped an hour ahead, then one from a host two minutes behind, each seen by both collectors.
    for name, offset_s in (("ahead", 3600.0), ("behind", -120.0)):
        done = revoke_with_clock_off(db_url, name, offset_s)
        assert done.returncode == 0, done.stderr
        time.sleep(1.5)  # the collectors poll every second
        assert not still_growing(db_url, name, 2.0), f"{name}'s stream was not closed"
    assert still_growing(db_url, "bystander", 1.0)
    assert "was revoked" in behind.output() and "was revoked" in ahead.output()


# ---------------------------------------------------------------- 28.3: no lock-out by claiming an id


@pytest.mark.timeout(180)
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_flood_of_registrations_claiming_a_victims_id_does_not_lock_it_out(
    tmp_path: Path, db_url: str, collector_process, agents: list[AgentProcess], capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    token = make_token(db_url, capsys)
    c = collector_process(db_url, token="").start()
    victim = AgentProcess(tmp_path, c.address, "victim", token=token).start()
    agents.append(victim)
    wait_until(lambda: host_rows(db_url, "victim") >= 5, 60, message="the victim streaming")
    victim_id = victim.agent_id()

    stop = threading.Event()
    codes: dict[str, int] = {}

    def flood() -> None:  # no credential, the victim's agent id, made-up device keys, as fast as it goes
        with grpc.insecure_channel(c.address) as channel:
            call = channel.unary_unary(REGISTER, request_serializer=pb.RegisterRequest.SerializeToString,
                                       response_deserializer=pb.RegisterResponse.FromString)
            req = pb.RegisterRequest(agent_id=victim_id, boot_id="b", name="victim", hostname="h")
            while not stop.is_set():
                md = (("fleetscope-agent-id", victim_id), ("fleetscope-device-key", uuid.uuid4().hex))
                try:
                    call(req, metadata=md, timeout=5)
                    name = "OK"
                except grpc.RpcError as exc:
                    name = exc.code().name
                codes[name] = codes.get(name, 0) + 1

    threads = [threading.Thread(target=flood) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        time.sleep(2.0)  # well past the 30 registrations a minute the victim is allowed
        victim.stop()  # the victim reconnects (a reboot, a network change) while the flood goes on
        stored = host_rows(db_url, "victim")
        victim.start()
        wait_until(lambda: host_rows(db_url, "victim") > stored + 3, 20, message="the victim streaming again during the flood")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert codes.get("OK", 0) == 0
    assert sum(codes.values()) > 60, codes
    assert codes.get("RESOURCE_EXHAUSTED", 0) > 0, codes  # the caller was throttled, not the victim


# ---------------------------------------------------------------- 28.4: one token, bounded


def _flood_batches(agent_id: str, deadline: float, message_chars: int) -> Iterator[bytes]:
    seq = 0
    while time.monotonic() < deadline:
        seq += 1
        b = pb.Batch(agent_id=agent_id, boot_id="boot-1", seq=seq, created_ns=time.time_ns())
        for i in range(3):
            b.logs.add(ts_ns=time.time_ns() + i, level=pb.LEVEL_INFO, source="flood", message="x" * message_chars)
        yield with_sent_ns(b.SerializeToString(), time.time_ns())


def _flood(address: str, agent_id: str, key: str, seconds: float, acked: list[int]) -> None:
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        call = channel.stream_stream(STREAM, request_serializer=lambda b: b, response_deserializer=pb.Ack.FromString)
        md = (("fleetscope-agent-id", agent_id), ("fleetscope-device-key", key))
        try:
            for ack in call(_flood_batches(agent_id, time.monotonic() + seconds, 30_000), metadata=md, timeout=seconds + 3):
                if ack.status == pb.Ack.STATUS_STORED:
                    acked.append(ack.seq)
        except grpc.RpcError:
            pass  # the deadline: the flood is over


@pytest.mark.timeout(240)
def test_one_token_enrols_within_its_limits_and_its_devices_share_one_quota(
    tmp_path: Path, db_url: str, collector_process, agents: list[AgentProcess], capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    default = make_token(db_url, capsys)
    assert scalar(db_url, "SELECT count(*) FROM enrolment_tokens WHERE max_devices = 10000 AND max_enrolments_per_min = 1000") == 1
    stolen = make_token(db_url, capsys, "--max-devices", "4")
    slow = make_token(db_url, capsys, "--max-enrolments", "3")
    quota = 256 << 10
    c = collector_process(db_url, token="", extra_args=("--token-max-bytes", str(quota))).start()
    bystander = AgentProcess(tmp_path, c.address, "bystander", token=default).start()
    agents.append(bystander)

    keys = {f"minted-{i}": "key-" + uuid.uuid4().hex for i in range(6)}
    results = [register_call(c.address, a, key=k, token=stolen) for a, k in keys.items()]
    assert [code_of(r) for r in results] == [grpc.StatusCode.OK] * 4 + [grpc.StatusCode.PERMISSION_DENIED] * 2
    assert "enrolled its limit of 4 devices" in results[4].details()  # type: ignore[union-attr]
    results = [register_call(c.address, f"slow-{i}", key=uuid.uuid4().hex, token=slow) for i in range(4)]
    assert [code_of(r) for r in results] == [grpc.StatusCode.OK] * 3 + [grpc.StatusCode.RESOURCE_EXHAUSTED]
    assert any(k == "retry-after" for k, _ in results[3].trailing_metadata())  # type: ignore[union-attr]
    assert scalar(db_url, "SELECT count(*) FROM device_credentials WHERE agent_id LIKE 'minted-%'") == 4

    # The four identities the stolen token minted flood together; they share the token's quota.
    wait_until(lambda: host_rows(db_url, "bystander") >= 5, 60, message="the bystander streaming")
    seconds = 5.0
    acked: dict[str, list[int]] = {a: [] for a in list(keys)[:4]}
    threads = [threading.Thread(target=_flood, args=(c.address, a, keys[a], seconds, acked[a])) for a in acked]
    started = time.monotonic()
    bystander_before = host_rows(db_url, "bystander")
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    elapsed = time.monotonic() - started
    stored_bytes = scalar(db_url, "SELECT COALESCE(sum(length(l.message)), 0) FROM log_events l JOIN devices d ON d.id = l.device_id "
                                  "WHERE d.agent_id LIKE 'minted-%'")
    batch = 3 * 30_000
    # The quota's rate over the flood, its 5 s burst, and one batch per stream read before the pause.
    assert stored_bytes <= quota * (elapsed + 5) + 4 * batch, (stored_bytes, elapsed)
    assert stored_bytes > 0
    assert host_rows(db_url, "bystander") > bystander_before + 5  # another token's device: unaffected
    assert still_growing(db_url, "bystander", 1.0)


# ---------------------------------------------------------------- 28.7: the wrong client certificate


@pytest.mark.timeout(120)
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_an_agent_without_or_with_a_foreign_client_certificate_is_told_it_is_a_certificate_problem(
    tmp_path: Path, db_url: str, collector_process, agents: list[AgentProcess]  # type: ignore[no-untyped-def]
) -> None:
    fleet, other = tmp_path / "fleet-ca", tmp_path / "other-ca"
    init_certs(fleet, agents=["good"])
    init_certs(other, agents=["intruder"])
    c = collector_process(db_url, extra_args=("--tls-cert", str(fleet / "collector.pem"), "--tls-key", str(fleet / "collector.key"),
                                              "--tls-client-ca", str(fleet / "ca.pem"))).start()
    tls = ("--tls-ca", str(fleet / "ca.pem"))
    no_cert = AgentProcess(tmp_path, c.address, "no-cert", token=c.token, extra=tls).start()
    foreign = AgentProcess(tmp_path, c.address, "foreign", token=c.token,
                           extra=(*tls, "--tls-cert", str(other / "agent-intruder.pem"), "--tls-key", str(other / "agent-intruder.key"))).start()
    good = AgentProcess(tmp_path, c.address, "good", token=c.token,
                        extra=(*tls, "--tls-cert", str(fleet / "agent-good.pem"), "--tls-key", str(fleet / "agent-good.key"))).start()
    agents.extend([no_cert, foreign, good])
    wait_until(lambda: "certificate problem" in no_cert.output() and "certificate problem" in foreign.output(), 40,
               message="both agents told it is a certificate problem")
    assert "requires a client certificate" in no_cert.output() and "--tls-cert" in no_cert.output()
    assert "refused this agent's client certificate" in foreign.output() and "agent-intruder.pem" in foreign.output()
    wait_until(lambda: host_rows(db_url, "good") >= 3, 30, message="the agent with the fleet's certificate streaming")
    assert scalar(db_url, "SELECT count(*) FROM devices WHERE name IN ('no-cert', 'foreign')") == 0


# ---------------------------------------------------------------- 27.3: secure by default


@pytest.mark.timeout(180)
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_collector_without_token_refuses_agents_without_credentials_unless_started_open(
    tmp_path: Path, db_url: str, collector_process, agents: list[AgentProcess], capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    certs = tmp_path / "certs"
    init_certs(certs)
    token = make_token(db_url, capsys)
    tls_flags = ("--tls-cert", str(certs / "collector.pem"), "--tls-key", str(certs / "collector.key"))
    # The documented TLS collector, without --token, while an enrolment token exists.
    c = collector_process(db_url, token="", extra_args=tls_flags).start()
    tls = ("--tls-ca", str(certs / "ca.pem"))
    bare = AgentProcess(tmp_path, c.address, "bare", extra=tls).start()
    enrolled = AgentProcess(tmp_path, c.address, "enrolled", token=token, extra=tls).start()
    agents.extend([bare, enrolled])
    wait_until(lambda: host_rows(db_url, "enrolled") >= 3, 60, message="the agent with a token streaming")
    wait_until(lambda: "refused this agent" in bare.output(), 20, message="the agent without credentials refused")
    assert scalar(db_url, "SELECT count(*) FROM devices WHERE name = 'bare'") == 0
    assert "agents without a credential are refused" in c.log_path.read_text()
    bare.stop()
    c.stop()

    # No TLS, no token anywhere, a fresh database: still refused.
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    c = collector_process(fresh, token="").start()
    plain = AgentProcess(tmp_path, c.address, "plain").start()
    agents.append(plain)
    wait_until(lambda: "refused this agent" in plain.output(), 30, message="refused on a fresh plaintext collector")
    assert scalar(fresh, "SELECT count(*) FROM devices") == 0
    plain.stop()
    c.stop()

    # Open only by the flag whose name says so, and it says so at start.
    c = collector_process(fresh, token="", extra_args=("--allow-unauthenticated",)).start()
    plain = AgentProcess(tmp_path, c.address, "plain").start()
    agents.append(plain)
    wait_until(lambda: host_rows(fresh, "plain") >= 3, 60, message="the open collector admitting the bare agent")
    assert "--allow-unauthenticated: any client" in c.log_path.read_text()
    c.stop()
    refused = subprocess.run([*CLI, "collector", "--db", fresh, "--token", "t", "--allow-unauthenticated"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
