"""The soak test's light load generator: a slice of simulated devices in one asyncio process, each
device one real ``Ingest/Stream`` gRPC stream speaking the agent's wire protocol.

    python benchmarks/soak_streams.py --target ipv4:127.0.0.1:7070,127.0.0.2:7070 --count 100 --token T --seconds 60

``benchmarks/bench_soak.py --load streams`` (its default) runs it as its worker; it also runs on
its own against any collector. Per device, as the agent does (``agent/daemon/``): a stable agent
id, a stream id (``identity.new_stream_id``) as the wire's boot id, a device key, Register then
Stream with ``authorization: Bearer <token>`` and the device-key headers, a channel of its own per
session with the uplink's ``CHANNEL_OPTIONS`` (pick_first over a shuffled address list),
batches built by ``batcher.build_batches``, stamped with agent id, boot id, seq and counters as
the agent's flush does, and stamped with ``with_sent_ns`` at every send, up to ``--window``
batches in flight, acknowledgements by seq (STATUS_REJECTED counted, never resent), the
uplink's failover and full-jitter ``Backoff`` between sessions, and every unacknowledged batch
sent again, in seq order, after a reconnect: at-least-once on the wire, exactly-once in storage
through the collector's (agent id, boot id, seq) check.

What it leaves out, and why it is cheaper than ``--load agents``: no spool (unacknowledged
batches are kept in memory, at most ``--max-unacked`` per device, oldest dropped first and
counted), no thread per device (one event loop), no log pipeline (the sampler's own log lines go
into the batches unclassified: the soak's samplers raise no incidents) and no clock-step
handling; the counters in its batches carry the process's RSS and CPU time, shared by its
devices. The samples are ``agent/tools/simulate.py``'s ``SimulatedSampler`` readings at 1 Hz,
the devices' ticks spread over the second, fresh every ``--fresh-every`` ticks and re-stamped in
between (``ReplayingSampler``: a fresh reading costs more than everything else a device does).

CPU, measured on a 2-core machine with another job beside it, 100-200 devices against one
collector, steady state: about 0.6-0.75 ms per device per second with a batch every 5 s and
0.9 ms with a batch every second (0.8-0.9 and 1.2 ms with every reading fresh), 85-90 % of it
this process's one Python thread (sampling, ``build_batches`` and encoding, asyncio and
grpc.aio), the rest gRPC's own threads. One process therefore carries about 1,000 devices
batching every 5 s; batching every second, give it two.

Protocol with the orchestrator: a JSON report line on stdout every 5 s (t, connected, backlog,
max_backlog, host, gpu, rejected: the host and GPU rows handed to batches so far); a line on
stdin (or its end, or Ctrl-C, or the end of ``--seconds``) stops the sampling; the devices then flush what they hold and
resend until everything is acknowledged or ``--drain-s`` passed, with ``draining: true``
reports meanwhile, and the last line adds ``final`` ({name: [host, gpu]}), ``undrained``
(batches never acknowledged) and ``dropped`` (batches dropped by ``--max-unacked``).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import logging
import os
import secrets
import signal
import sys
import threading
import time
import uuid
from typing import TypeVar

import grpc

from fleetscope.agent import __version__
from fleetscope.agent.daemon.batcher import Pending, build_batches
from fleetscope.agent.daemon.clocks import boot_clock_ns
from fleetscope.agent.daemon.identity import hostname, new_stream_id, read_boot_id

# The agent's own wire pieces, private ones included: imported so that the two cannot drift apart.
from fleetscope.agent.daemon.uplink import (
    _AUTH_CODES,
    CHANNEL_OPTIONS,
    REGISTER_METHOD,
    STREAM_METHOD,
    Backoff,
    _retry_after,
    with_sent_ns,
)
from fleetscope.agent.records import GpuSample, HostSample
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.agent.tools.simulate import SIMULATED_LABEL, SimulatedSampler
from fleetscope.proto.v1 import telemetry_pb2 as pb
from fleetscope.proto.vocabulary import CAPABILITIES

log = logging.getLogger("soak_streams")
_Record = TypeVar("_Record", HostSample, GpuSample)

REPORT_EVERY_S = 5.0  # bench_soak.py's workers report at this pace
DRAIN_POLL_S = 0.25  # how soon the end of the drain is noticed
SAMPLE_INTERVAL_S = 1.0
# A real device has the collector connection to itself. gRPC shares a subchannel (one TCP
# connection) between channels of one process that have the same target and options, so
# without this a thousand devices would multiplex over a handful of connections.
STREAM_CHANNEL_OPTIONS = [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
AGENT_ID_HEADER = "fleetscope-agent-id"  # as the uplink sends them with a device key
DEVICE_KEY_HEADER = "fleetscope-device-key"
CLOCK_BOOT_ID = read_boot_id()  # the kernel boot the monotonic clock counts from


def _identity(b: bytes) -> bytes:
    return b  # batches go out as the bytes they were encoded to once, like the spool's


class ReplayingSampler:
    """``SimulatedSampler``'s readings at a fraction of its CPU: a fresh reading every
    ``fresh_every`` ticks and, in between, the last one again stamped with the new time. The same
    record types, rows and columns go on the wire; the values move every ``fresh_every`` seconds
    instead of every second, and the sampler's log lines come with fresh readings only.

    Why: a fresh reading costs about 0.2 ms (a Jetson) to 0.35 ms (an 8-GPU server with 64
    cores) of CPU, a replayed one about 0.01-0.05 ms; at 1,000 devices that is the difference
    between a third of a core and a few hundredths."""

    def __init__(self, inner: SimulatedSampler, fresh_every: int) -> None:
        self.inner = inner
        self._fresh_every = fresh_every
        self._ticks = 0
        self._last: SampleSet | None = None

    def sample(self, now_ns: int) -> SampleSet:
        self._ticks += 1
        last = self._last
        if last is None or (self._ticks - 1) % self._fresh_every == 0:
            self._last = self.inner.sample(now_ns)
            return self._last
        return SampleSet(host=[_restamped(h, now_ns) for h in last.host], gpu=[_restamped(g, now_ns) for g in last.gpu],
                         metrics=[_restamped_point(m, now_ns) for m in last.metrics])


def _restamped(record: _Record, ts_ns: int) -> _Record:
    new = copy.copy(record)
    object.__setattr__(new, "ts_ns", ts_ns)  # a frozen dataclass: set as its own __init__ does
    return new


def _restamped_point(point: pb.MetricPoint, ts_ns: int) -> pb.MetricPoint:
    new = pb.MetricPoint()
    new.CopyFrom(point)
    new.ts_ns = ts_ns
    return new


class ProcessReadings:
    """The process's RSS and CPU time, read at most once a second: every device of this process
    reports the same figures in its counters (a real agent reads its own process's)."""

    def __init__(self) -> None:
        self._read_at = float("-inf")
        self.rss_bytes = 0
        self.cpu_seconds = 0.0

    def refresh(self) -> None:
        now = time.monotonic()
        if now - self._read_at < 1.0:
            return
        self._read_at = now
        times = os.times()
        self.cpu_seconds = times.user + times.system
        try:
            with open("/proc/self/statm") as f:
                self.rss_bytes = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            self.rss_bytes = 0


class SimulatedDevice:
    """One device: samples at 1 Hz into batches, and one stream (one session at a time) that
    sends them and forgets each once it is acknowledged."""

    def __init__(self, index: int, *, addresses: list[str], token: str, gpus_per_server: int, fresh_every: int,
                 window: int, max_unacked: int, process: ProcessReadings) -> None:
        self.kind = "jetson" if index % 2 else "server"  # as bench_soak's agent workers
        self.name = f"soak-{index:05d}"
        simulated = SimulatedSampler(kind=self.kind, gpus=gpus_per_server, seed=index, latency=False)
        self.sampler = simulated if fresh_every == 1 else ReplayingSampler(simulated, fresh_every)
        self._inventory = simulated.inventory_message()
        self.agent_id = str(uuid.uuid4())  # what identity.load_or_create_agent_id makes, kept in memory
        self.boot_id = new_stream_id(read_boot_id())
        self._device_key = secrets.token_urlsafe(32)  # as credentials.load_or_create_device_key
        self._metadata = (("authorization", f"Bearer {token}"), (AGENT_ID_HEADER, self.agent_id),
                          (DEVICE_KEY_HEADER, self._device_key))
        self._addresses = addresses
        self._window = window
        self._max_unacked = max_unacked
        self._process = process
        self._backoff = Backoff()  # AgentSettings' defaults: 0.5 s doubling to 30 s
        self._pending = Pending()
        self.unacked: dict[int, bytes] = {}  # seq -> encoded batch; insertion order is seq order
        self._unacked_bytes = 0
        self._samples_in: dict[int, int] = {}  # seq -> sample rows, for the drop counters
        self._next_seq = 1
        self._changed = asyncio.Event()  # a batch was added or acknowledged: the sender looks again
        self._in_flight: set[int] = set()  # sent in the current session, not yet acknowledged
        self._dropped_in_flight: set[int] = set()  # dropped while in flight: an ack takes the drop back
        self._max_batch_bytes = 0
        self._connects = 0
        self.connected = False
        self.host_rows = self.gpu_rows = 0  # handed to batches
        self.acked = self.rejected = self.reconnects = 0
        self.dropped_batches = self.dropped_samples = 0
        self.last_error = ""
        self.phase = "starting"  # what the uplink is doing: for the reports of devices not streaming
        self.last_ack_at = time.monotonic()  # for the reports of devices streaming without progress
        self.session_started_at = 0.0

    # -- sampling and batching --------------------------------------------------------------

    def tick(self) -> None:
        records = self.sampler.sample(time.time_ns())
        self.host_rows += len(records.host)
        self.gpu_rows += len(records.gpu)
        self._pending.add(records)

    def flush(self) -> None:
        """The pending records as batches, stamped as the agent's flush stamps them before spooling."""
        pending, self._pending = self._pending, Pending()
        if pending.empty():
            return
        built = build_batches(pending, now_ns=time.time_ns(), now_mono_ns=boot_clock_ns(), clock_boot_id=CLOCK_BOOT_ID)
        counters = self._counters()
        for bb in built:
            b = bb.batch
            b.agent_id, b.boot_id, b.seq = self.agent_id, self.boot_id, self._next_seq
            self._next_seq += 1
            b.counters.CopyFrom(counters)
            self._keep(b.seq, b.SerializeToString(), bb.samples)
        self._changed.set()

    def _counters(self) -> pb.AgentCounters:
        self._process.refresh()
        return pb.AgentCounters(
            spool_batches=len(self.unacked), spool_bytes=self._unacked_bytes,
            dropped_batches=self.dropped_batches, dropped_samples=self.dropped_samples,
            reconnects=self.reconnects, rejected_batches=self.rejected,
            rss_bytes=float(self._process.rss_bytes), cpu_seconds=self._process.cpu_seconds,
        )

    def _keep(self, seq: int, payload: bytes, samples: int) -> None:
        self.unacked[seq] = payload
        self._unacked_bytes += len(payload)
        self._samples_in[seq] = samples
        while len(self.unacked) > self._max_unacked:  # bounded like the spool: the oldest go first
            oldest = next(iter(self.unacked))
            self.dropped_batches += 1
            self.dropped_samples += self._samples_in.get(oldest, 0)
            if oldest in self._in_flight:
                self._dropped_in_flight.add(oldest)
            self._forget(oldest)

    def _forget(self, seq: int) -> None:
        payload = self.unacked.pop(seq, None)
        if payload is not None:
            self._unacked_bytes -= len(payload)
        self._samples_in.pop(seq, None)

    async def run_sampling(self, start_delay_s: float, batch_interval_s: float) -> None:
        """Sample every second and flush every ``batch_interval_s``, paced as the agent's loop."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(start_delay_s)
        next_sample = loop.time()
        next_flush = next_sample + batch_interval_s
        while True:
            self.tick()
            now = loop.time()
            if now >= next_flush:
                self.flush()
                next_flush = now + batch_interval_s
            next_sample += SAMPLE_INTERVAL_S
            if next_sample < now:  # fell behind (a busy machine): don't burst
                next_sample = now + SAMPLE_INTERVAL_S
            await asyncio.sleep(next_sample - now)

    # -- the uplink ---------------------------------------------------------------------------

    def register_request(self) -> pb.RegisterRequest:
        """As ``Agent.register_request`` builds it."""
        req = pb.RegisterRequest(
            agent_id=self.agent_id, boot_id=self.boot_id, name=self.name, hostname=hostname(),
            kind=pb.DEVICE_KIND_JETSON if self.kind == "jetson" else pb.DEVICE_KIND_SERVER,
            agent_version=__version__, capabilities=list(CAPABILITIES),
        )
        req.inventory.CopyFrom(self._inventory)
        req.labels.update({SIMULATED_LABEL: "true", "soak": "true"})
        return req

    async def run_uplink(self, start_delay_s: float) -> None:
        """Sessions one after another, paced and failed over as ``Uplink._run`` does."""
        await asyncio.sleep(start_delay_s)
        attempt = 0  # full rounds of the address list that failed: the backoff grows with them
        failed_in_round = 0  # addresses tried in a row without progress
        address_index = 0
        while True:
            address = self._addresses[address_index % len(self._addresses)]
            acked_before = self.acked
            self.phase = "registering"
            retry_after_s = 0.0
            paced = False
            try:
                await self._session(address)
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                self.last_error = f"{address}: {code.name}: {exc.details()}"
                if code in _AUTH_CODES:
                    log.error("%s: collector %s refused this device (%s): check --token", self.name, address, exc.details())
                    attempt = max(attempt, 4)
                elif code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    retry_after_s = _retry_after(exc)
                    paced = retry_after_s > 0
                    log.warning("%s: %s", self.name, self.last_error)
                else:
                    log.warning("%s: %s; retrying", self.name, self.last_error)
            except Exception as exc:  # never let a device's uplink die: it would go silent
                self.last_error = f"{address}: {exc!r}"
                log.exception("%s: uplink error with %s", self.name, address)
            finally:
                self.connected = False
            if paced:  # as the uplink: the same address when the collector said, the backoff unchanged
                self.phase = f"told to wait {retry_after_s:.0f} s"
                await asyncio.sleep(max(retry_after_s, self._backoff.initial_s / 2))
                continue
            address_index += 1
            if self.acked > acked_before:
                attempt = failed_in_round = 0  # the last session made progress: start the backoff afresh
                delay = self._backoff.delay(0)
            else:
                failed_in_round += 1
                if failed_in_round < len(self._addresses):
                    delay = self._backoff.delay(0)  # another address may be alive: try it soon
                else:  # every address failed: back off
                    failed_in_round = 0
                    delay = self._backoff.delay(attempt)
                    attempt += 1
            self.phase = f"waiting {max(delay, retry_after_s):.0f} s" if retry_after_s <= delay else f"told to wait {retry_after_s:.0f} s"
            await asyncio.sleep(max(delay, retry_after_s))

    async def _session(self, address: str) -> None:
        """Register, open the stream, send and read acks until it ends (an error raises)."""
        # A channel per session, as the uplink's: the name is resolved again and the shuffled
        # pick_first chooses among the addresses afresh, so a dead collector is left behind.
        async with grpc.aio.insecure_channel(address, options=STREAM_CHANNEL_OPTIONS) as channel:
            register = channel.unary_unary(REGISTER_METHOD, request_serializer=pb.RegisterRequest.SerializeToString,
                                           response_deserializer=pb.RegisterResponse.FromString)
            request = self.register_request()
            request.sent_ns = time.time_ns()
            reply = await register(request, metadata=self._metadata, timeout=10.0, wait_for_ready=False)
            self._max_batch_bytes = reply.max_batch_bytes
            if self._connects:
                self.reconnects += 1
            self._connects += 1
            stream = channel.stream_stream(STREAM_METHOD, request_serializer=_identity, response_deserializer=pb.Ack.FromString)
            call = stream(metadata=self._metadata)
            self._in_flight = set()  # a new session: everything unacknowledged is sent again
            self._dropped_in_flight = set()  # acks of the last session's batches can no longer come
            sender = asyncio.create_task(self._send(call))
            self.connected = True
            self.phase = "streaming"
            self.session_started_at = time.monotonic()
            try:
                while True:
                    ack = await call.read()  # raises when the call ends with an error
                    if ack is grpc.aio.EOF:
                        return  # the collector ended the stream cleanly (shutting down): reconnect
                    self._on_ack(ack)
            finally:
                sender.cancel()

    async def _send(self, call: grpc.aio.StreamStreamCall) -> None:
        """Unacknowledged batches in seq order, never more than the window in flight."""
        last_sent = 0
        try:
            while True:
                nxt = self._next_after(last_sent) if len(self._in_flight) < self._window else None
                if nxt is None:
                    self._changed.clear()  # no await since the check: nothing can slip in between
                    await self._changed.wait()
                    continue
                seq, payload = nxt
                last_sent = seq
                limit = self._max_batch_bytes
                if limit and len(payload) > limit:
                    # The collector would end the stream with RESOURCE_EXHAUSTED on every try.
                    log.error("%s: not sending batch %d: %d bytes exceed the collector's limit of %d",
                              self.name, seq, len(payload), limit)
                    self.rejected += 1
                    self._forget(seq)
                    continue
                self._in_flight.add(seq)
                await call.write(with_sent_ns(payload, time.time_ns(), boot_clock_ns(), CLOCK_BOOT_ID))
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
            pass  # the call ended: the reading side reports how
        except Exception:
            log.exception("%s: sending failed", self.name)
            call.cancel()  # end the session rather than wait for acks that cannot come

    def _next_after(self, seq: int) -> tuple[int, bytes] | None:
        for s, payload in self.unacked.items():  # seq order; short unless the collectors are away
            if s > seq:
                return s, payload
        return None

    def _on_ack(self, ack: pb.Ack) -> None:
        if ack.status == pb.Ack.STATUS_REJECTED:
            log.error("%s: collector rejected batch %d: %s; it will not be resent", self.name, ack.seq, ack.reason)
            self.rejected += 1
        if ack.seq in self._dropped_in_flight:  # it reached the collector after all
            self._dropped_in_flight.discard(ack.seq)
            self.dropped_batches -= 1
        self._forget(ack.seq)
        self._in_flight.discard(ack.seq)
        self.acked += 1
        self.last_ack_at = time.monotonic()
        self._changed.set()


def report(devices: list[SimulatedDevice], **extra: object) -> None:
    backlog = [len(d.unacked) for d in devices]
    print(json.dumps({"t": time.time(), "connected": sum(d.connected for d in devices),
                      "backlog": sum(backlog), "max_backlog": max(backlog),
                      "host": sum(d.host_rows for d in devices), "gpu": sum(d.gpu_rows for d in devices),
                      "rejected": sum(d.rejected for d in devices), "not_streaming": not_streaming(devices),
                      "stalled": stalled(devices), **extra}),
          flush=True)


def stalled(devices: list[SimulatedDevice], after_s: float = 60.0) -> list:
    """Devices streaming with batches to deliver and no acknowledgement for ``after_s``: their
    count, and the one waiting longest (name, s since its last ack, its session's age, batches
    unacknowledged and in flight)."""
    now = time.monotonic()
    stuck = [d for d in devices if d.connected and d.unacked and now - d.last_ack_at > after_s]
    if not stuck:
        return []
    d = min(stuck, key=lambda d: d.last_ack_at)
    return [len(stuck), d.name, round(now - d.last_ack_at), round(now - d.session_started_at), len(d.unacked), len(d._in_flight)]


def not_streaming(devices: list[SimulatedDevice], top: int = 3) -> list[list]:
    """Why the devices that are not streaming are not: the commonest (phase, last error) pairs
    with their counts, the error's numbers and addresses left out so that alike ones group."""
    import re
    from collections import Counter

    numbers = re.compile(r"\d+(\.\d+)*")  # ports, addresses, seconds: N, so that alike errors group
    why = Counter(f"{d.phase}; last error: {numbers.sub('N', d.last_error.split(': ', 1)[-1])[:100] or '-'}"
                  for d in devices if not d.connected)
    return [[n, text] for text, n in why.most_common(top)]


async def run(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    process = ProcessReadings()
    devices = [SimulatedDevice(i, addresses=args.target, token=args.token, gpus_per_server=args.gpus_per_server,
                               fresh_every=args.fresh_every, window=args.window, max_unacked=args.max_unacked, process=process)
               for i in range(args.first, args.first + args.count)]
    stop = asyncio.Event()

    def wait_for_stop_line() -> None:
        sys.stdin.readline()  # the orchestrator writes a line (or dies: end of file)
        loop.call_soon_threadsafe(stop.set)

    if args.seconds:
        loop.call_later(args.seconds, stop.set)
    else:
        threading.Thread(target=wait_for_stop_line, daemon=True).start()

    def on_interrupt() -> None:  # Ctrl-C stops like the stop line; a second one interrupts
        stop.set()
        loop.remove_signal_handler(signal.SIGINT)

    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    # Each device starts at its own fraction of the second, so that ticks (and batches) spread
    # over it instead of arriving together.
    offsets = [k / len(devices) for k in range(len(devices))]
    samplers = [asyncio.create_task(d.run_sampling(off, args.batch_interval)) for d, off in zip(devices, offsets, strict=True)]
    uplinks = [asyncio.create_task(d.run_uplink(off)) for d, off in zip(devices, offsets, strict=True)]
    while True:
        try:
            await asyncio.wait_for(stop.wait(), REPORT_EVERY_S)
            break
        except asyncio.TimeoutError:
            report(devices)
    for task in samplers:
        task.cancel()  # between ticks (a tick never awaits): the counts match what was batched
    await asyncio.gather(*samplers, return_exceptions=True)
    for d in devices:
        d.flush()
    deadline = loop.time() + args.drain_s
    next_report = loop.time()
    while loop.time() < deadline and any(d.unacked for d in devices):
        if loop.time() >= next_report:
            report(devices, draining=True)
            next_report += REPORT_EVERY_S
        await asyncio.sleep(DRAIN_POLL_S)
    final = {d.name: [d.host_rows, d.gpu_rows] for d in devices}
    report(devices, final=final, undrained=sum(len(d.unacked) for d in devices),
           dropped=sum(d.dropped_batches for d in devices))
    for task in uplinks:
        task.cancel()
    await asyncio.gather(*uplinks, return_exceptions=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="See the module docstring for what it does like the agent and what it leaves out.")
    p.add_argument("--target", action="append", required=True, metavar="ADDRESS",
                   help="a collector address as the agent takes it, e.g. ipv4:127.0.0.1:7070,127.0.0.2:7070 "
                        "(one channel over all its addresses); repeat it for failover between addresses, in order")
    p.add_argument("--token", default="soak-token", help="the collector's token (default soak-token, bench_soak's)")
    p.add_argument("--first", type=int, default=0, help="index of the first device: names soak-FIRST.. (default 0)")
    p.add_argument("--count", type=int, default=100, help="devices in this process (default 100)")
    p.add_argument("--gpus-per-server", type=int, default=8, help="GPUs of each simulated server (default 8)")
    p.add_argument("--batch-interval", type=float, default=1.0, metavar="S",
                   help="seconds between a device's batches; samples stay at 1 Hz (default 1)")
    p.add_argument("--seconds", type=float, default=0.0,
                   help="sample this long, then drain and report; 0: until a line (or end of file) on stdin (default 0)")
    p.add_argument("--fresh-every", type=int, default=10, metavar="TICKS",
                   help="a fresh SimulatedSampler reading every TICKS seconds, the last one re-stamped in between "
                        "(1: all fresh, about 0.3 ms of CPU per device-second more; default 10)")
    p.add_argument("--drain-s", type=float, default=180.0, help="after the stop, how long to resend until all is acked (default 180)")
    p.add_argument("--window", type=int, default=16, help="batches in flight per stream, as the agent's (default 16)")
    p.add_argument("--max-unacked", type=int, default=3600, metavar="BATCHES",
                   help="unacknowledged batches a device keeps; beyond it the oldest are dropped and counted "
                        "(the agent's spool bound; default 3600)")
    p.add_argument("-v", "--verbose", action="store_true", help="log reconnects and retries too (default: errors only)")
    args = p.parse_args(argv)
    if args.count < 1 or args.first < 0:
        p.error("--count must be 1 or more and --first 0 or more")
    if min(args.window, args.max_unacked, args.fresh_every, args.gpus_per_server) < 1 or args.batch_interval <= 0:
        p.error("--window, --max-unacked, --fresh-every, --gpus-per-server and --batch-interval must be positive")
    if args.drain_s < 0 or args.seconds < 0:
        p.error("--drain-s and --seconds must be 0 or more")
    # Reconnects during the soak's kills are expected and logged as warnings; errors are not.
    logging.basicConfig(level=logging.WARNING if args.verbose else logging.ERROR,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:  # a second Ctrl-C: the first one started the drain
        print("soak_streams: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
