"""The workers of a ``--workers N`` collector even out their agents (collector.ingest.worker_balance).

Two balancers over one real shared file, as two worker processes have, with the clocks in the
test's hands: the kernel's hash is played by the test choosing which worker each agent reaches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetscope.collector.ingest.worker_balance import StreamBalancer, WorkerLoads, connection_weight, slack


class Clock:
    def __init__(self) -> None:
        self.s = 1000.0

    def __call__(self) -> float:
        return self.s

    def ns(self) -> int:
        return int(self.s * 1e9)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def group(tmp_path: Path, clock: Clock, workers: int = 2) -> list[StreamBalancer]:
    path = tmp_path / "agents"
    WorkerLoads.create(path, workers)
    return [StreamBalancer(WorkerLoads(path, i, clock_ns=clock.ns), clock=clock) for i in range(workers)]


def connect(b: StreamBalancer, n: int) -> bool:
    """Agent ``n`` registers on a new connection to ``b`` and, when admitted, opens its stream."""
    if not b.admit(f"ipv4:127.0.0.1:{40000 + n}", f"agent-{n}"):
        return False
    b.opened(f"ipv4:127.0.0.1:{40000 + n}")
    return True


def test_a_hash_that_sends_every_agent_to_one_worker_still_ends_even(tmp_path: Path, clock: Clock) -> None:
    a, b = group(tmp_path, clock)
    placed: dict[int, StreamBalancer] = {}
    for n in range(20):
        # The worst hash: every first connection reaches worker a; a turned-away agent's new
        # connection reaches b.
        if connect(a, n):
            placed[n] = a
        else:
            assert connect(b, n), "the other worker admits the agent a turned away"
            placed[n] = b
    assert (a.load, b.load) in {(10, 10), (11, 9)}, (a.load, b.load)
    assert a.refused == b.load and b.refused == 0


def test_an_agent_is_turned_away_a_few_times_at_most_then_admitted_wherever_it_lands(tmp_path: Path, clock: Clock) -> None:
    a, b = group(tmp_path, clock)
    assert connect(a, 0), "b holds none: a takes one (the tolerance), then turns agents away"
    # The hash keeps sending this agent's new connections back to a: turned away three times...
    for port in range(50000, 50003):
        assert not a.admit(f"ipv4:127.0.0.1:{port}", "unlucky")
    # ...then admitted, not bounced for ever.
    assert a.admit("ipv4:127.0.0.1:50003", "unlucky")
    assert a.refused == 3
    clock.s += a.refuse_again_s - 1
    b.heartbeat()  # b stays alive, and empty
    assert a.admit("ipv4:127.0.0.1:50004", "unlucky"), "within refuse_again_s: not turned away again"
    clock.s += 2.0
    b.heartbeat()
    assert not a.admit("ipv4:127.0.0.1:50005", "unlucky"), "a new window: it may be turned away again"


def test_a_dead_or_unstarted_worker_draws_nobody(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "agents"
    WorkerLoads.create(path, 2)
    a = StreamBalancer(WorkerLoads(path, 0, clock_ns=clock.ns), clock=clock)
    # Worker 1 never started: its slot has no heartbeat, so a admits everyone and sheds nobody.
    assert all(connect(a, n) for n in range(10))
    assert a.surplus() == 0
    b = StreamBalancer(WorkerLoads(path, 1, clock_ns=clock.ns), clock=clock)
    assert a.surplus() == 5, "worker 1 alive and empty: half of a's excess (10 - 0), leaves"
    clock.s += 11.0  # b's heartbeat is stale now (it stopped beating: hung, killed)
    a.heartbeat()
    assert a.surplus() == 0
    b.heartbeat()
    assert a.surplus() == 5
    b.leave()  # a clean stop: not alive from this moment
    assert a.surplus() == 0
    b.opened("ipv4:127.0.0.1:60000")  # a stream closing or opening during its stop does not revive it
    assert a.loads.counts()[1] is None


def test_streams_on_one_connection_count_once_and_a_connection_ends_with_its_last_stream(tmp_path: Path, clock: Clock) -> None:
    a, _b = group(tmp_path, clock)
    peer = "ipv4:127.0.0.1:41000"
    assert a.admit(peer, "x")
    a.opened(peer)
    a.opened(peer)
    assert a.load == 1 and a.loads.counts()[0] == 1
    a.closed(peer)
    assert a.load == 1
    a.closed(peer)
    assert a.load == 0 and a.loads.counts()[0] == 0


def test_a_registration_never_followed_by_a_stream_stops_counting(tmp_path: Path, clock: Clock) -> None:
    a, _b = group(tmp_path, clock)
    assert a.admit("ipv4:127.0.0.1:42000", "gone")
    assert a.load == 1
    clock.s += a.unclaimed_s + 1
    a.heartbeat()
    assert a.load == 0 and a.loads.counts()[0] == 0


def test_streams_leave_the_busier_worker_each_agent_a_few_times_at_most(tmp_path: Path, clock: Clock) -> None:
    a, b = group(tmp_path, clock)
    a_peers: dict[int, str] = {}
    turned: set[int] = set()
    for n in range(12):  # every agent reaches a, again after each turn-away: a keeps it in the end
        tries = 0
        while not a.admit(f"{n}:{tries}", f"agent-{n}"):
            tries += 1
        assert tries in (0, a.turn_away_limit)
        if tries:
            turned.add(n)
        a_peers[n] = f"{n}:{tries}"
        a.opened(a_peers[n])
    for n in range(12, 14):
        assert connect(b, n)
    # a: 12, b: 2 -> a holds 10 too many; half of them leave.
    assert a.surplus() == 5
    streams = [(f"stream-{n}", f"agent-{n}", a_peers[n]) for n in reversed(range(12))]  # newest first
    # Agents turned away three times at registration in this window are not asked again: every
    # one but agent-0, which a took at once.
    assert turned == set(range(1, 12))
    assert a.choose_to_shed(streams) == ["stream-0"]
    assert a.shed == 1
    clock.s += a.refuse_again_s
    b.heartbeat()
    assert len(a.choose_to_shed(streams)) == 5, "a new window: any agent may be asked"
    assert b.surplus() == 0, "the less loaded worker sheds nobody"


def test_the_slack_grows_with_the_fleet() -> None:
    assert slack(0) == 0 and slack(19) == 0 and slack(20) == 1
    assert slack(1000) == 50


def test_servers_and_drones_are_split_by_what_they_carry_not_by_count(tmp_path: Path, clock: Clock) -> None:
    a, b = group(tmp_path, clock)
    server, drone = connection_weight(8), connection_weight(1)
    assert (server, drone) == (9, 2)
    # The hash sends the ten servers first, each first to a; then the ten drones, each first to b.
    for n in range(10):
        if not a.admit(f"s{n}", f"server-{n}", server):
            assert b.admit(f"s{n}'", f"server-{n}", server)
    for n in range(10):
        if not b.admit(f"d{n}", f"drone-{n}", drone):
            assert a.admit(f"d{n}'", f"drone-{n}", drone)
    total = 10 * server + 10 * drone
    assert a.load + b.load == total
    assert abs(a.load - b.load) <= server, (a.load, b.load)  # by count it could be 10 servers against 10 drones


def test_a_stream_heavier_than_the_excess_stays(tmp_path: Path, clock: Clock) -> None:
    a, b = group(tmp_path, clock)
    for peer, weight in (("big", 9), ("small-1", 2), ("small-2", 2)):
        assert a.admit(peer, peer, weight) or a.admit(peer, peer, weight) or a.admit(peer, peer, weight) \
            or a.admit(peer, peer, weight)
        a.opened(peer)
    assert b.admit("other", "other", 9)
    b.opened("other")
    clock.s += a.refuse_again_s  # the turn-aways above are of an earlier window
    b.heartbeat()
    # a carries 13, b 9: 4 too many; moving the 9 would leave b 18 against a's 4, so the small
    # ones are the candidates, and one of them (weight 2) moves the excess's half.
    streams = [("big", "big", "big"), ("small-1", "small-1", "small-1"), ("small-2", "small-2", "small-2")]
    assert a.surplus() == 2
    assert a.choose_to_shed(streams) == ["small-1"]


def test_a_file_that_is_not_a_loads_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_bytes(b"123")
    with pytest.raises(ValueError, match="not a worker loads file"):
        WorkerLoads(bad, 0)
    good = tmp_path / "good"
    WorkerLoads.create(good, 2)
    with pytest.raises(ValueError, match="outside the 2 workers"):
        WorkerLoads(good, 2)
