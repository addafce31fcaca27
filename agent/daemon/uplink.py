"""The one gRPC stream from an agent to its collector.

The uplink runs on its own thread and never raises into the sampling loop. It registers,
opens ``Ingest/Stream`` and sends spooled batches with up to ``window`` batches in flight; each
acknowledgement deletes its batch from the spool. Every time it picks what to send next it asks
the spool for incidents first, then logs, then samples, each oldest first
(``Spool.next_to_send``), so an incident written while a long backlog drains over a thin link
goes next instead of after the backlog; the batches in flight in this session are left out of
the pick, and a new session sends again everything still spooled. When the stream breaks it
sleeps (capped exponential backoff with full jitter, on an Event so shutdown interrupts it),
rebuilds the channel, moves to the next collector address and sends again every batch still in
the spool: at-least-once on the wire, exactly-once in storage thanks to the collector's check.

Failover: an address that fails without progress is followed by the next one after the
shortest (jittered) pause; the backoff grows only when a whole round of addresses failed. An
address may be a DNS name with several records: each session opens a new channel, so the name
is resolved again, and gRPC's pick_first (shuffled) skips an address that refuses or does not
answer within 250 ms.

Retryable failures (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL,
UNKNOWN, CANCELLED by a collector shutting down) are retried quietly; UNAUTHENTICATED and
PERMISSION_DENIED are logged as errors and retried slowly, since an operator must fix the token
and the spool keeps everything meanwhile.

Batches are spooled compact (``fleetscope.proto.compact``) and sent as their spooled bytes to a
collector that announced compact-v1 at Register; an older collector gets each one expanded to
the plain fields. Either way ``sent_ns`` (and the monotonic clock and boot id
beside it) appended as more encoded fields (protobuf lets a later occurrence of a scalar field
win), so a resend costs no re-encoding.

``rate_bytes_per_s`` (``fleetscope agent --uplink-rate``) paces what is written to the stream
with a token bucket that holds one second of the rate: a metered or radio link is never
saturated, so the link's own queue stays short and a new incident is not stuck behind it. Each
message counts as its bytes plus ``GRPC_FRAMING_BYTES``, 40: gRPC's 5-byte length prefix, the
9-byte HTTP/2 DATA frame header that carries it (9 more for every further 16 KiB frame), and
the two 13-byte HTTP/2 WINDOW_UPDATE frames the agent sends back for its acknowledgement
(measured: about 2.2 a batch). Not counted: HTTP/2 pings (about 10 bytes a batch), a stream's
headers (once a connection), TLS records and TCP/IP headers.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError

from fleetscope.agent.daemon.clocks import boot_clock_ns
from fleetscope.agent.daemon.credentials import ChannelTLS
from fleetscope.agent.daemon.spool import Spool
from fleetscope.proto.compact import CompactError, expand
from fleetscope.proto.v1 import telemetry_pb2 as pb
from fleetscope.proto.vocabulary import CAPABILITY_COMPACT, REBALANCE_DETAIL

log = logging.getLogger(__name__)

STREAM_METHOD = "/fleetscope.v1.Ingest/Stream"
REGISTER_METHOD = "/fleetscope.v1.Ingest/Register"
_SENT_NS_TAG = bytes([5 << 3 | 0])  # field 5 (sent_ns), varint
_SENT_MONO_NS_TAG = bytes([15 << 3 | 0])  # field 15 (sent_mono_ns), varint
_SENT_BOOT_ID_TAG = bytes([(16 << 3 | 2) & 0x7F | 0x80, (16 << 3 | 2) >> 7])  # field 16 (sent_boot_id), bytes
_AUTH_CODES = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
# Per message: gRPC's length prefix, one HTTP/2 DATA frame header, and the two WINDOW_UPDATE frames
# that its acknowledgement makes the agent send (see above).
GRPC_FRAMING_BYTES = 5 + 9 + 2 * 13
_HTTP2_FRAME_BYTES = 16384  # HTTP/2's default largest frame: a longer message takes more headers

CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.max_receive_message_length", 16 << 20),
    # Reconnect quickly once the collector is back; our own backoff paces attempts.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 5_000),
    # A name with several addresses (``collectors.fleet.internal:7070`` with an A record per
    # collector): gRPC's pick_first tries them in turn, the next one 250 ms after an attempt
    # that has not finished (happy eyeballs), so a dead collector is skipped at once. Shuffled,
    # so that a fleet given one name spreads over the collectors instead of all taking the first.
    ("grpc.service_config", '{"loadBalancingConfig": [{"pick_first": {"shuffleAddressList": true}}]}'),
    # A connection of its own, as one agent per device has: gRPC otherwise shares a process's
    # connections to one address among its channels, and agents run together in one process
    # (``fleetscope simulate``, tests) would all ride one connection, to one collector worker.
    ("grpc.use_local_subchannel_pool", 1),
]


def encode_varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 two's complement, as protobuf encodes negatives
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def with_sent_ns(payload: bytes, sent_ns: int, sent_mono_ns: int = 0, sent_boot_id: str = "") -> bytes:
    """``payload`` stamped with the send time; the monotonic reading only travels with its boot id."""
    out = payload + _SENT_NS_TAG + encode_varint(sent_ns)
    if sent_mono_ns and sent_boot_id:
        boot = sent_boot_id.encode()
        out += _SENT_MONO_NS_TAG + encode_varint(sent_mono_ns) + _SENT_BOOT_ID_TAG + encode_varint(len(boot)) + boot
    return out


def _identity(b: bytes) -> bytes:
    return b


def wire_bytes(message_bytes: int) -> int:
    """What one stream message of ``message_bytes`` costs the link, framing included (see above)."""
    frames = max(1, -(-(message_bytes + 5) // _HTTP2_FRAME_BYTES))
    return message_bytes + GRPC_FRAMING_BYTES + 9 * (frames - 1)


class TokenBucket:
    """``rate`` bytes a second, in bursts of at most ``burst`` (default: one second of the rate).

    A message is paid for after it was written (``spend``); the bucket may go into debt for a
    message larger than it holds, and the next one waits (``wait_s``) until the debt is paid, so
    the long-run rate is ``rate`` whatever the message sizes.
    """

    def __init__(self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError("the rate must be above 0")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else rate)
        self._clock = clock
        self._tokens = self.burst
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def spend(self, n: int) -> None:
        self._refill()
        self._tokens -= n

    def wait_s(self) -> float:
        """How long until the next message may be written (0: now)."""
        self._refill()
        return max(0.0, -self._tokens / self.rate)


@dataclass(frozen=True)
class Backoff:
    initial_s: float = 0.5
    maximum_s: float = 30.0
    multiplier: float = 2.0

    def delay(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(max, initial * multiplier**attempt)]."""
        ceiling = min(self.maximum_s, self.initial_s * self.multiplier**attempt)
        return random.uniform(self.initial_s / 2, max(self.initial_s / 2, ceiling))


@dataclass
class UplinkStatus:
    connected: bool = False
    collector: str = ""
    last_error: str = ""
    sent: int = 0  # batches written to a stream (a resend counts again)
    acked: int = 0
    rejected: int = 0
    clock_skew_ns: int = 0
    max_batch_bytes: int = 0
    collector_compact: bool = False  # the collector announced compact-v1 at Register


class Uplink:
    def __init__(
        self,
        spool: Spool,
        *,
        addresses: list[str],
        token: str,
        register_request: Callable[[], pb.RegisterRequest],
        window: int = 16,
        backoff: Backoff | None = None,
        ack_timeout_s: float = 60.0,
        compression: grpc.Compression | None = None,
        clock: Callable[[], int] = time.time_ns,
        mono_clock: Callable[[], int] = boot_clock_ns,
        clock_boot_id: str = "",
        tls: ChannelTLS | None = None,
        agent_id: str = "",
        device_key: str = "",
        rate_bytes_per_s: float = 0.0,
        drain_order: str = "priority",
        fresh_samples_s: float = 0.0,
    ) -> None:
        if not addresses:
            raise ValueError("at least one collector address is needed")
        self._spool = spool
        self._addresses = list(addresses)
        self._tls = tls  # None: plaintext (loopback and tests only)
        self._token = token
        # With a device key, the agent id and key open this agent's identity at the collector
        # (collector/ingest/identity.py); an enrolment token is sent only until it enrolled.
        self._identity = (("fleetscope-agent-id", agent_id), ("fleetscope-device-key", device_key)) if device_key else ()
        self._enrolled = False
        self._retry_after_s = 0.0
        self._register_request = register_request
        self._window = max(1, window)
        self._backoff = backoff or Backoff()
        self._ack_timeout_s = ack_timeout_s
        self._compression = compression
        # 0: unlimited. Kept across sessions, so a reconnect earns no extra burst.
        self._bucket = TokenBucket(rate_bytes_per_s) if rate_bytes_per_s > 0 else None
        # "priority" (see above) or "fifo", the order before it (kept for comparisons:
        # benchmarks/bench_thin_link.py). ``fresh_samples_s`` sends the samples of the last
        # seconds before the backlog; off, because the collector's rollups and detectors read a
        # device's samples in time order and would skip backlog stored behind newer samples.
        self.drain_order = drain_order
        self.fresh_samples_s = fresh_samples_s
        self._clock = clock  # the device clock, which may be off: the collector measures the skew
        # With the boot id, lets the collector see a wall-clock step between a batch's creation and its send.
        self._mono_clock = mono_clock
        self._clock_boot_id = clock_boot_id  # the kernel boot the monotonic clock counts from
        self._stop = threading.Event()
        self._wake = threading.Event()  # set when a new batch is spooled
        self._thread: threading.Thread | None = None
        self._address_index = 0
        self._connects = 0
        # Tries in a row that an address ended as soon as the connection opened (see _run).
        self._closed_at_once: dict[str, int] = {}
        self.status = UplinkStatus()
        self._call: grpc.Future | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fleetscope-uplink", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        """False once the thread started and died (it catches everything, so that is a bug)."""
        return self._thread is None or self._thread.is_alive() or self._stop.is_set()

    def set_rate(self, rate_bytes_per_s: float) -> None:
        """Pace to a new rate from the next batch on (0: unlimited), e.g. when a drone that
        landed moves from its radio link to a faster one."""
        self._bucket = TokenBucket(rate_bytes_per_s) if rate_bytes_per_s > 0 else None

    def notify(self) -> None:
        """A new batch is in the spool."""
        self._wake.set()

    def drain(self, timeout_s: float) -> bool:
        """Wait until the spool is empty or ``timeout_s`` passed; True when everything was acked."""
        deadline = time.monotonic() + timeout_s
        self._wake.set()
        while time.monotonic() < deadline:
            if self._spool.stats().batches == 0:
                return True
            time.sleep(0.05)
        return self._spool.stats().batches == 0

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        call = self._call
        if call is not None:
            call.cancel()
        if self._thread is not None:
            self._thread.join(timeout_s)

    # -- the connection loop ----------------------------------------------------------------

    def _run(self) -> None:
        attempt = 0  # full rounds of the address list that failed: the backoff grows with them
        failed_in_round = 0  # addresses tried in a row without progress
        while not self._stop.is_set():
            address = self._addresses[self._address_index % len(self._addresses)]
            acked_before = self.status.acked
            closed_at_once = False
            rebalanced = False
            paced = False
            try:
                self._session(address)
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                detail = exc.details() if hasattr(exc, "details") else str(exc)
                self.status.last_error = f"{address}: {getattr(code, 'name', code)}: {detail}"
                if self._stop.is_set():
                    break
                if code == grpc.StatusCode.UNAVAILABLE and str(detail).startswith(REBALANCE_DETAIL):
                    # One worker of a --workers collector asks this agent onto a new connection,
                    # which the kernel may give to another worker: routine, not a failure.
                    rebalanced = True
                    self.status.last_error = ""
                    log.info("collector %s: %s", address, detail)
                elif code in _AUTH_CODES:
                    log.error("collector %s refused this agent (%s): check --token; data stays spooled", address, detail)
                    attempt = max(attempt, 4)
                elif code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    self._retry_after_s = _retry_after(exc)
                    paced = self._retry_after_s > 0
                    log.warning("collector %s: %s (%s); retrying after %.1f s", address, code.name, detail, self._retry_after_s)
                elif code == grpc.StatusCode.UNAVAILABLE and "Socket closed" in str(detail) and not self._connects:
                    # A TLS collector ends a plaintext connection at once, every time, and a
                    # collector with mutual TLS ends one whose client certificate it refuses (or
                    # that has none) the same way: under TLS 1.3 the agent's side of the
                    # handshake has finished by then, so gRPC says no more than "Socket closed".
                    # A collector that dies while this agent connects does it once, and the next
                    # try is refused. Only the same answer twice in a row from never-registered-
                    # with addresses points at TLS or a certificate.
                    closed_at_once = True
                    if self._closed_at_once.get(address, 0) >= 1:
                        hint = self._closed_at_once_hint()
                        log.error("collector %s closed the connection at once, again (%s): %s", address, detail,
                                  hint.replace("does the collector use", "does it use"))
                        self.status.last_error += f" ({hint})"
                    else:
                        log.warning("collector %s closed the connection at once (%s); retrying", address, detail)
                elif code == grpc.StatusCode.UNAVAILABLE and "handshake" in str(detail).lower():
                    log.error("TLS with collector %s failed (%s): check --tls-ca, the collector's certificate "
                              "(names, expiry) and, for mutual TLS, --tls-cert/--tls-key", address, detail)
                else:
                    log.warning("collector %s: %s (%s); retrying", address, getattr(code, "name", code), detail)
            except Exception as exc:  # never let the uplink thread die: the agent would go silent
                self.status.last_error = f"{address}: {exc!r}"
                log.exception("uplink error with %s", address)
            finally:
                self.status.connected = False
                self._call = None
            self._closed_at_once[address] = self._closed_at_once.get(address, 0) + 1 if closed_at_once else 0
            if self._stop.is_set():
                break
            if rebalanced:  # the same address again, after the shortest pause; no backoff
                self._stop.wait(self._backoff.delay(0))
                continue
            if paced:
                # The collector is up and said when to come back (its registration queue is full
                # after a restart, or this agent's own allowance is spent): the same address then,
                # the backoff unchanged. Counted as a failure, a few refusals in a storm grew the
                # backoff to its 30 s cap and the agent came back long after its turn.
                # Never sooner than the backoff's shortest pause: a collector answering "retry after
                # 0.001 s" (a bug, or a hostile one) must not turn this loop into a flood.
                delay, self._retry_after_s = max(self._retry_after_s, self._backoff.initial_s / 2), 0.0
                self._stop.wait(delay)
                continue
            self._address_index += 1
            if self.status.acked > acked_before:
                attempt = failed_in_round = 0  # the last session made progress: start the backoff afresh
                delay = self._backoff.delay(0)
            else:
                failed_in_round += 1
                if failed_in_round < len(self._addresses):
                    # Another address may be alive: try it after the shortest pause (jittered, so a
                    # fleet leaving a dead collector does not reach the next one all at once).
                    delay = self._backoff.delay(0)
                else:  # every address failed: back off
                    failed_in_round = 0
                    delay = self._backoff.delay(attempt)
                    attempt += 1
            delay = max(delay, self._retry_after_s)
            self._retry_after_s = 0.0
            self._stop.wait(delay)

    def _closed_at_once_hint(self) -> str:
        """What a collector that ends every connection at once most likely wants of this agent."""
        if self._tls is None:
            return "does the collector use TLS? give --tls-ca"
        if self._tls.cert is None:
            return ("a certificate problem: the collector requires a client certificate (mutual TLS, --tls-client-ca); "
                    "give --tls-cert and --tls-key signed by its CA ('fleetscope certs init --agent NAME')")
        return (f"a certificate problem: the collector refused this agent's client certificate {self._tls.cert}; "
                "is it signed by the CA the collector has as --tls-client-ca, and not expired?")

    @property
    def _metadata(self) -> tuple[tuple[str, str], ...]:
        token = self._token
        if self._enrolled and token.startswith("fse1."):
            token = ""  # enrolled: the device key is the credential, the enrolment token stays home
        return ((("authorization", f"Bearer {token}"),) if token else ()) + self._identity

    def _channel(self, address: str) -> grpc.Channel:
        if self._tls is None:
            return grpc.insecure_channel(address, options=CHANNEL_OPTIONS, compression=self._compression)
        return grpc.secure_channel(address, self._tls.credentials(), options=CHANNEL_OPTIONS, compression=self._compression)

    def _session(self, address: str) -> None:
        with self._channel(address) as channel:
            register = channel.unary_unary(
                REGISTER_METHOD,
                request_serializer=pb.RegisterRequest.SerializeToString,
                response_deserializer=pb.RegisterResponse.FromString,
            )
            request = self._register_request()
            request.sent_ns = self._clock()
            reply = register(request, metadata=self._metadata, timeout=10.0, wait_for_ready=False)
            self._enrolled = bool(self._identity)
            self.status.clock_skew_ns = reply.clock_skew_ns
            self.status.max_batch_bytes = reply.max_batch_bytes
            # The spool holds batches compact; a collector from before compact-v1 gets them expanded.
            self.status.collector_compact = CAPABILITY_COMPACT in reply.capabilities
            if self._connects:
                self._spool.count("reconnects")
            self._connects += 1
            stream = channel.stream_stream(
                STREAM_METHOD, request_serializer=_identity, response_deserializer=pb.Ack.FromString
            )
            session = _Session()
            try:
                call = stream(self._paced(self._requests(session), session), metadata=self._metadata)
                self._call = call
                self.status.connected = True
                self.status.collector = address
                log.info("streaming to collector %s", address)
                for ack in call:
                    self._on_ack(session, ack)
            finally:
                session.close()

    def _requests(self, session: _Session) -> Iterator[bytes]:
        """Spooled batches in send order (``Spool.next_to_send``), never more than ``window``
        unacknowledged, none sent twice in this session.

        Runs on a gRPC thread. It belongs to one session: once that session closed it sends
        nothing more, so a stale generator cannot interleave with the next connection.
        """
        while not (self._stop.is_set() or session.closed):
            room = session.wait_for_room(self._window, self._stop)
            if room <= 0:
                continue
            if self._bucket is not None:
                room = 1  # paced: choose each batch when it can leave, so a new incident goes next
            # In flight: sent and not yet acknowledged (an acknowledged batch has left the spool).
            batches = self._spool.next_to_send(room, skip=session.in_flight(), order=self.drain_order,
                                               fresh_s=self.fresh_samples_s)
            if not batches:
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            for b in batches:
                if session.closed:
                    return
                try:
                    payload = self._wire_payload(b.payload)
                except (CompactError, DecodeError) as exc:  # a damaged spool entry: sending it again would not help
                    self._reject_locally(b.seq, f"cannot be read back from the spool ({exc})")
                    continue
                limit = self.status.max_batch_bytes
                if limit and len(payload) > limit:
                    # The collector would end the stream with RESOURCE_EXHAUSTED on every try.
                    self._reject_locally(b.seq, f"{len(b.payload)} bytes exceed the collector's limit of {limit}")
                    continue
                session.sent(b.seq)
                self.status.sent += 1
                yield with_sent_ns(payload, self._clock(), self._mono_clock(), self._clock_boot_id)

    def _paced(self, messages: Iterator[bytes], session: _Session) -> Iterator[bytes]:
        """``messages`` at the bucket's rate: after each one is written, wait until it is paid
        for, and only then let ``_requests`` pick the next batch."""
        for message in messages:
            yield message
            bucket = self._bucket
            if bucket is None:
                continue
            bucket.spend(wire_bytes(len(message)))
            while not (self._stop.is_set() or session.closed) and bucket is self._bucket:  # set_rate: stop waiting
                delay = bucket.wait_s()
                if delay <= 0:
                    break
                self._stop.wait(min(delay, 0.25))

    def _wire_payload(self, spooled: bytes) -> bytes:
        """A spooled batch as this collector reads it: as it is, or expanded to plain fields."""
        if self.status.collector_compact:
            return spooled
        batch = pb.Batch.FromString(spooled)
        return expand(batch).SerializeToString() if batch.compact else spooled

    def _reject_locally(self, seq: int, why: str) -> None:
        reason = f"batch {seq}: {why}"
        log.error("not sending %s; it is dropped", reason)
        self._spool.count("rejected_batches", reason=reason)
        self._spool.delete(seq)
        self.status.rejected += 1

    def _on_ack(self, session: _Session, ack: pb.Ack) -> None:
        if ack.status == pb.Ack.STATUS_REJECTED:
            reason = f"batch {ack.seq}: {ack.reason}"
            log.error("collector rejected %s; it will not be resent", reason)
            self._spool.count("rejected_batches", reason=reason)
            self.status.rejected += 1
        self._spool.delete(ack.seq)
        self.status.acked += 1
        session.acked(ack.seq)


def _retry_after(exc: grpc.RpcError) -> float:
    """The ``retry-after`` (seconds) a collector sent with RESOURCE_EXHAUSTED; 0 when none."""
    try:
        for key, value in exc.trailing_metadata() or ():
            if key == "retry-after":
                return min(300.0, max(0.0, float(value)))
    except (AttributeError, ValueError, TypeError):
        pass
    return 0.0


class _Session:
    """The in-flight window of one stream."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._inflight: set[int] = set()
        self.closed = False

    def wait_for_room(self, window: int, stop: threading.Event) -> int:
        with self._cv:
            if len(self._inflight) >= window and not (self.closed or stop.is_set()):
                self._cv.wait(0.5)
            return window - len(self._inflight)

    def sent(self, seq: int) -> None:
        with self._cv:
            self._inflight.add(seq)

    def in_flight(self) -> frozenset[int]:
        with self._cv:
            return frozenset(self._inflight)

    def acked(self, seq: int) -> None:
        with self._cv:
            self._inflight.discard(seq)
            self._cv.notify_all()

    def close(self) -> None:
        with self._cv:
            self.closed = True
            self._cv.notify_all()
