"""Fresh before old on a thin link: the order the uplink sends spooled batches in.

A real ``Spool`` on a temporary directory and the uplink's own request generator, driven by
hand (no server): incidents first, then logs, each oldest first, then samples oldest first;
nothing sent twice in a session; everything unacknowledged sent again in the next one; the
in-memory overflow in the same order; and the pacing of ``--uplink-rate``.
"""

from __future__ import annotations

import argparse
import types
from pathlib import Path

import pytest

from fleetscope.agent.daemon import spool as spool_module
from fleetscope.agent.daemon.batcher import CLASS_INCIDENTS, CLASS_LOGS, CLASS_SAMPLES
from fleetscope.agent.daemon.spool import Spool
from fleetscope.agent.daemon.uplink import GRPC_FRAMING_BYTES, TokenBucket, Uplink, _Session, wire_bytes
from fleetscope.cli import build_parser
from fleetscope.cli.args import rate_bytes_per_s
from fleetscope.proto.v1 import telemetry_pb2 as pb


def _put(spool: Spool, cls: int, size: int = 200) -> int:
    seq = spool.reserve_seq()
    batch = pb.Batch(agent_id="a", boot_id="b", seq=seq)
    batch.created_boot_id = "x" * size  # bulk, so a size can be asked for
    spool.put(seq, batch.SerializeToString(), delivery_class=cls, samples=10 if cls == CLASS_SAMPLES else 0,
              logs=5 if cls == CLASS_LOGS else 0, incidents=1 if cls == CLASS_INCIDENTS else 0)
    return seq


def _fill(spool: Spool, classes: str, size: int = 200) -> dict[str, list[int]]:
    """Puts one batch per letter (s, l, i) in that order; their seqs by class."""
    out: dict[str, list[int]] = {"s": [], "l": [], "i": []}
    for c in classes:
        out[c].append(_put(spool, {"s": CLASS_SAMPLES, "l": CLASS_LOGS, "i": CLASS_INCIDENTS}[c], size))
    return out


def _order(spool: Spool, limit: int = 1000, **kw) -> list[int]:  # type: ignore[no-untyped-def]
    return [b.seq for b in spool.next_to_send(limit, **kw)]


def test_incidents_then_logs_then_samples_each_oldest_first(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    seqs = _fill(spool, "sssslsssisslsssiss")
    assert _order(spool) == seqs["i"] + seqs["l"] + seqs["s"]
    assert _order(spool, 3) == seqs["i"] + seqs["l"][:1], "a short pick takes the most urgent"
    assert _order(spool, order="fifo") == sorted(seqs["i"] + seqs["l"] + seqs["s"]), "the order before"
    # What is in flight is left out; the rest keeps its order.
    skip = set(seqs["i"][:1] + seqs["s"][:2])
    assert _order(spool, skip=skip) == seqs["i"][1:] + seqs["l"] + seqs["s"][2:]
    # An acknowledged batch leaves the spool; a new incident goes before every sample.
    spool.delete(seqs["i"][0])
    late = _put(spool, CLASS_INCIDENTS)
    assert _order(spool, 4) == seqs["i"][1:] + [late] + seqs["l"]
    with pytest.raises(ValueError):
        spool.next_to_send(1, order="newest")


def test_after_keeps_its_meaning(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    seqs = _fill(spool, "sisl")
    all_seqs = sorted(sum(seqs.values(), []))
    assert [b.seq for b in spool.after(0, 10)] == all_seqs
    assert [b.seq for b in spool.after(all_seqs[1], 2)] == all_seqs[2:4]


def test_the_memory_overflow_is_sent_in_the_same_order(tmp_path: Path) -> None:
    spool = Spool(tmp_path, memory_max_bytes=1 << 20)
    on_disk = _fill(spool, "ssils")
    db = spool._db
    assert db is not None
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")  # a full disk, as SQLite sees it
    in_memory = _fill(spool, "sils", 20_000)
    assert spool.stats().memory_batches == 4, "the disk refused them: they are held in memory"
    want = (sorted(on_disk["i"] + in_memory["i"]) + sorted(on_disk["l"] + in_memory["l"])
            + sorted(on_disk["s"] + in_memory["s"]))
    assert want[-1] == in_memory["s"][-1], "the newest, last"
    assert _order(spool) == want
    got = spool.next_to_send(100)
    assert all(pb.Batch.FromString(b.payload).seq == b.seq for b in got), "payloads from disk and memory"
    assert _order(spool, skip={in_memory["i"][0]})[0] == on_disk["i"][0]
    for seq in want:
        spool.delete(seq)
    assert spool.next_to_send(100) == [] and spool.stats().batches == 0


def test_a_fresh_window_of_samples_goes_before_the_backlog_when_asked(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    now = [1000.0]
    monkeypatch.setattr(spool_module, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    spool = Spool(tmp_path)
    backlog = _fill(spool, "ssss")["s"]
    now[0] += 3600  # an hour later, the link is back
    fresh = _fill(spool, "ss")["s"]
    now[0] += 1
    fresher = _fill(spool, "ls")
    assert _order(spool) == fresher["l"] + backlog + fresh + fresher["s"], "off unless asked: samples oldest first"
    # (the newest batch still goes last, see the next test)
    assert _order(spool, fresh_s=120) == fresher["l"] + fresh + backlog + fresher["s"]
    assert _order(spool, fresh_s=120, skip={fresh[0]}) == fresher["l"] + fresh[1:] + backlog + fresher["s"]
    late = _fill(spool, "s")["s"]
    assert _order(spool, fresh_s=120) == fresher["l"] + fresh + fresher["s"] + backlog + late
    now[0] += 200
    assert _order(spool, fresh_s=120) == fresher["l"] + backlog + fresh + fresher["s"] + late, "no longer fresh"


def test_the_newest_batch_goes_last_unless_it_holds_incidents(tmp_path: Path) -> None:
    """The collector keeps a device's counters and "stopped" mark from the batch it stored last."""
    spool = Spool(tmp_path)
    backlog = _fill(spool, "sss")["s"]
    flush = _fill(spool, "sl")  # one flush: its readings, then its log lines
    assert _order(spool) == backlog + flush["s"] + flush["l"], "the flush's logs wait for its samples"
    assert _order(spool, 2) == backlog[:2]
    assert _order(spool, skip=set(backlog + flush["s"])) == flush["l"], "nothing else left: it goes"
    newer = _fill(spool, "s")["s"]
    assert _order(spool) == flush["l"] + backlog + flush["s"] + newer, "a newer batch frees it"
    counters_only = spool.reserve_seq()  # what reports the last drops: no samples, logs or incidents
    spool.put(counters_only, pb.Batch(seq=counters_only).SerializeToString(), delivery_class=CLASS_INCIDENTS,
              samples=0, logs=0, incidents=0)
    assert _order(spool)[-1] == counters_only
    incident = _put(spool, CLASS_INCIDENTS)
    assert _order(spool)[:2] == [counters_only, incident], "an incident does not wait, and frees the one before"
    final = spool.reserve_seq()  # the agent's last batch before a clean stop, holding an incident
    spool.put(final, pb.Batch(seq=final, final=True).SerializeToString(), delivery_class=CLASS_INCIDENTS,
              samples=0, logs=0, incidents=1)
    assert _order(spool)[-1] == final and _order(spool)[0] == counters_only
    assert _order(spool, order="fifo")[-1] == final


# -- the uplink's request generator, one session at a time -----------------------------------


def _uplink(spool: Spool, **kw) -> Uplink:  # type: ignore[no-untyped-def]
    return Uplink(spool, addresses=["127.0.0.1:1"], token="t", register_request=pb.RegisterRequest, **kw)


def _take(requests, n: int) -> list[int]:  # type: ignore[no-untyped-def]
    """The seqs of the next ``n`` messages the generator yields (each has something to send)."""
    return [pb.Batch.FromString(next(requests)).seq for _ in range(n)]


def _ack(uplink: Uplink, session: _Session, seq: int) -> None:
    uplink._on_ack(session, pb.Ack(seq=seq, status=pb.Ack.STATUS_STORED))


def test_an_incident_overtakes_the_backlog_and_a_new_session_resends_everything_unacked(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    backlog = _fill(spool, "s" * 40)["s"]
    uplink = _uplink(spool, window=8)
    session = _Session()
    requests = uplink._requests(session)
    first = _take(requests, 8)
    assert first == backlog[:8], "the window fills with the oldest backlog"
    log_line = _put(spool, CLASS_LOGS)
    incident = _put(spool, CLASS_INCIDENTS)
    _ack(uplink, session, first[0])
    _ack(uplink, session, first[1])
    assert _take(requests, 2) == [incident, log_line], "the next free places go to the incident, then the log"
    for seq in first[2:5]:
        _ack(uplink, session, seq)
    assert _take(requests, 3) == backlog[8:11], "then the backlog again, where it was, none sent twice"
    session.close()

    # The stream broke: the next session sends every batch still unacknowledged, none missed.
    unacked = sorted(set(first[5:]) | set(backlog[8:11]) | {incident, log_line})
    assert spool.stats().batches == len(backlog) - 5 + 2
    late = _put(spool, CLASS_INCIDENTS)
    again = _Session()
    requests = uplink._requests(again)
    sent: list[int] = []
    while len(sent) < len(backlog) - 5 + 3:
        seq = _take(requests, 1)[0]
        sent.append(seq)
        _ack(uplink, again, seq)
    assert sent[:3] == [incident, late, log_line]
    assert sent[3:] == sorted(set(backlog) - set(first[:5])), "the backlog oldest first, every unacked batch once"
    assert set(unacked) <= set(sent) and len(sent) == len(set(sent))
    assert spool.stats().batches == 0
    again.close()


def test_fifo_drain_order_is_the_order_before(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    seqs = _fill(spool, "ssissl")
    uplink = _uplink(spool, window=16, drain_order="fifo")
    session = _Session()
    assert _take(uplink._requests(session), 6) == sorted(sum(seqs.values(), []))
    session.close()


# -- --uplink-rate ---------------------------------------------------------------------------


def test_the_token_bucket_paces_to_the_rate_after_a_burst_of_one_second() -> None:
    now = [0.0]
    bucket = TokenBucket(4000, clock=lambda: now[0])
    for _ in range(4):
        bucket.spend(1000)
        assert bucket.wait_s() == 0, "a second's worth goes at once"
    bucket.spend(1000)
    assert bucket.wait_s() == pytest.approx(0.25)
    now[0] += 0.25
    assert bucket.wait_s() == 0
    bucket.spend(10_000)  # a batch larger than the bucket: sent, then paid for
    assert bucket.wait_s() == pytest.approx(2.5)
    now[0] += 100  # idle: the bucket refills to one second, no more
    for _ in range(4):
        bucket.spend(1000)
    bucket.spend(1)
    assert bucket.wait_s() > 0
    # Over a long run the rate is the rate, whatever the sizes.
    now[0], sent = 0.0, 0
    bucket = TokenBucket(4000, clock=lambda: now[0])
    for size in [300, 7000, 50, 1200, 16_000, 900] * 20:
        now[0] += bucket.wait_s()
        bucket.spend(size)
        sent += size
    now[0] += bucket.wait_s()
    assert (sent - 4000) / now[0] == pytest.approx(4000, rel=1e-9)


def test_a_message_costs_its_bytes_and_its_framing() -> None:
    assert GRPC_FRAMING_BYTES == 40, "5 (gRPC prefix) + 9 (DATA frame) + 2 x 13 (WINDOW_UPDATEs for its ack)"
    assert wire_bytes(100) == 140
    assert wire_bytes(16384 - 5) == 16384 - 5 + 40, "one frame"
    assert wire_bytes(16384 - 4) == 16384 - 4 + 40 + 9, "one more frame header"


def test_paced_requests_wait_for_the_bucket_and_pick_each_batch_when_it_can_leave(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    backlog = _fill(spool, "ssssss")["s"]
    uplink = _uplink(spool, window=16, rate_bytes_per_s=1000.0)
    now = [0.0]
    uplink._bucket = TokenBucket(1000.0, clock=lambda: now[0])
    incidents: list[int] = []

    def wait(delay: float) -> bool:  # the uplink's stop event, on the fake clock
        if not incidents:
            incidents.append(_put(spool, CLASS_INCIDENTS))  # written while the uplink waits for the link
        now[0] += delay
        return False

    uplink._stop = types.SimpleNamespace(is_set=lambda: False, wait=wait, set=lambda: None)  # type: ignore[assignment]
    session = _Session()
    requests = uplink._paced(uplink._requests(session), session)
    sizes: list[int] = []  # of the backlog sent, about 280 bytes a message
    while True:
        message = next(requests)
        seq = pb.Batch.FromString(message).seq
        if incidents:  # it waited for the link, and meanwhile an incident was written
            assert seq == incidents[0], "chosen when it could leave: the incident, before the backlog"
            break
        assert seq == backlog[len(sizes)]
        sizes.append(wire_bytes(len(message)))
    assert sum(sizes[:-1]) <= 1000 < sum(sizes), "the first second's worth at once, then a wait"
    assert now[0] == pytest.approx((sum(sizes) - 1000) / 1000), "then it waited for the link, no longer"
    session.close()


def test_set_rate_takes_effect_at_once(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    backlog = _fill(spool, "ssss", 2000)["s"]
    uplink = _uplink(spool, window=16, rate_bytes_per_s=1000.0)
    waits: list[float] = []

    def wait(delay: float) -> bool:  # a landed drone's faster link: the rate is lifted while it waits
        waits.append(delay)
        uplink.set_rate(0)
        return False

    uplink._stop = types.SimpleNamespace(is_set=lambda: False, wait=wait, set=lambda: None)  # type: ignore[assignment]
    session = _Session()
    requests = uplink._paced(uplink._requests(session), session)
    assert _take(requests, 4) == backlog
    assert len(waits) == 1 and uplink._bucket is None, "it stopped waiting when the rate was lifted"
    uplink.set_rate(500.0)
    assert uplink._bucket is not None and uplink._bucket.rate == 500.0
    session.close()


@pytest.mark.parametrize("text, rate", [
    ("32kbit/s", 4000.0), ("4KB/s", 4000.0), ("4kB/s", 4000.0), ("1Mbit/s", 125_000.0), ("500B/s", 500.0),
    ("4KiB/s", 4096.0), ("1MiB/s", 1 << 20), ("64kbps", 8000.0), ("512Kibit/s", 65536.0), ("1.5 Mbit/s", 187_500.0),
    ("0", 0.0),
])
def test_uplink_rate_forms(text: str, rate: float) -> None:
    assert rate_bytes_per_s(text) == rate


@pytest.mark.parametrize("text, says", [
    ("32kb/s", "bit/s for bits or B/s for bytes"), ("fast", "not a rate"), ("-4KB/s", "not a rate"),
    ("32kbit", "not a rate"), ("100bit/s", "below 1kbit/s"), ("4mB/s", "not a rate"),
])
def test_uplink_rate_nonsense_is_one_line_naming_the_forms(text: str, says: str, capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(argparse.ArgumentTypeError, match=says):
        rate_bytes_per_s(text)
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["agent", "--collector", "127.0.0.1:1", f"--uplink-rate={text}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("fleetscope agent: error: argument --uplink-rate:") and says in err
    assert "Traceback" not in capsys.readouterr().err


def test_uplink_rate_reaches_the_uplink(tmp_path: Path) -> None:
    args = build_parser().parse_args(["agent", "--collector", "127.0.0.1:1", "--uplink-rate", "32kbit/s"])
    assert args.uplink_rate == 4000.0
    assert build_parser().parse_args(["agent", "--collector", "127.0.0.1:1"]).uplink_rate == 0.0
    from fleetscope.agent.daemon.runner import Agent, AgentSettings

    agent = Agent(AgentSettings(collectors=("127.0.0.1:1",), spool_dir=tmp_path, uplink_rate_bytes_per_s=4000.0,
                                device_key=False),
                  samplers=[], inventory=pb.Inventory(), kind=pb.DEVICE_KIND_SERVER)
    assert agent.uplink._bucket is not None and agent.uplink._bucket.rate == 4000.0
    agent.spool.close()
