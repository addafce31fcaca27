"""The gRPC ingest service: authentication, validation, hand-off to the writer, acknowledgements.

Each agent holds one ``Stream``. Batches are validated on arrival; a valid one goes to the
group-commit writer and its acknowledgement is sent when its transaction committed. An
invalid one is acknowledged at once as REJECTED with INVALID_ARGUMENT and the field at fault,
and the stream goes on: one bad batch never disturbs the agent's others, or other agents.

Clock skew: every batch carries ``sent_ns`` (device clock at send) and, from newer agents, the
device's monotonic clock beside it and beside ``created_ns``. ``clocks.place_batch`` turns them
into one correction per batch; when it exceeds ``skew_tolerance_ns`` (a device whose clock is
off, typically a Jetson without an RTC before NTP) the batch's timestamps are shifted onto the
collector's clock, so "the last hour" means the same on every device, and a batch spooled
before the device's clock stepped lands where its rows were sampled, not hours away.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc
from google.protobuf.message import DecodeError
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from fleetscope.collector.errors import BatchInvalid, StoreUnavailable
from fleetscope.collector.ingest.agent_limits import AgentLimiter, AgentLimits
from fleetscope.collector.ingest.clocks import BootAnchors, place_batch
from fleetscope.collector.ingest.identity import (
    Authenticator,
    IdentityRefused,
    Presented,
    grpc_code,
    quota_group,
)
from fleetscope.collector.ingest.registration_gate import RegistrationGate, RegistrationShed
from fleetscope.collector.ingest.validation import (
    Limits,
    check_batch_identity,
    expand_compact,
    validate_batch,
    validate_registration,
)
from fleetscope.collector.ingest.worker_balance import StreamBalancer, connection_weight
from fleetscope.collector.storage.credentials import revocation_count, revoked_among, sha256_hex
from fleetscope.collector.storage.registry import lookup_device_id, register_device
from fleetscope.collector.storage.writer import BatchWriter, WriteItem, WriteOutcome
from fleetscope.proto import vocabulary
from fleetscope.proto.v1 import telemetry_pb2 as pb
from fleetscope.proto.v1 import telemetry_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

COLLECTOR_VERSION = "0.1.0"
CAPABILITIES = vocabulary.CAPABILITIES  # what this collector understands; the agent offers the same list


class IngestService(pb_grpc.IngestServicer):
    def __init__(
        self,
        engine: Engine,
        writer: BatchWriter,
        *,
        tokens: frozenset[str] | None,
        limits: Limits | None = None,
        max_batch_bytes: int = 32 << 20,
        skew_tolerance_ns: int = 2 * 10**9,
        max_unacked_bytes_per_stream: int = 64 << 20,
        max_unacked_bytes: int = 64 << 20,
        agent_limits: AgentLimits | None = None,
        revocation_poll_s: float = 1.0,
        allow_unauthenticated: bool = False,
        max_registrations_in_flight: int = 8,
        balancer: StreamBalancer | None = None,
    ) -> None:
        self._engine = engine
        # Identity (ingest/identity.py), limits per agent (ingest/agent_limits.py), and the open
        # streams by agent id, each with the event that ends it when its device is revoked.
        self._auth = Authenticator(engine, tokens, allow_unauthenticated=allow_unauthenticated)
        self.limiter = AgentLimiter(agent_limits or AgentLimits())
        self.registrations = RegistrationGate(max_registrations_in_flight)
        # Agent ids whose device key passed here (SHA-256 of the key): their calls are never
        # throttled for what other callers at the same address (a NAT, a proxy) had refused.
        self._verified: dict[str, str] = {}
        self._streams_by_agent: dict[str, set[asyncio.Event]] = {}
        # The workers of one ``--workers N`` collector even out their agents (ingest.worker_balance).
        self.balancer = balancer
        self._balancing: asyncio.Task | None = None
        self._open_streams: set[_StreamBinding] = set()
        self._revocation_poll_s = revocation_poll_s
        self._revocations: asyncio.Task | None = None
        self._writer = writer
        self._tokens = tokens
        self._limits = limits or Limits()
        self._max_batch_bytes = max_batch_bytes
        self._skew_tolerance_ns = skew_tolerance_ns
        self._boot_anchors = BootAnchors()
        self._logged_steps: dict[tuple[str, str], int] = {}  # per stream, the clock step last logged
        self.reanchored = 0  # batches placed by the monotonic clock after a step of the device's clock
        self._max_unacked_bytes_per_stream = max_unacked_bytes_per_stream
        # Across all streams: batches read and not yet acknowledged (in the writer's queue or
        # transaction). A slow database fills it; streams are then not read, and HTTP/2 flow
        # control and the agents' windows hold the batches in their spools.
        self.budget = IngestBudget(max_unacked_bytes)
        self._device_ids: dict[str, int] = {}
        self._closing = asyncio.Event()
        self.rejected = 0
        self._refusals_logged: set[tuple[str, str]] = set()  # (agent or peer, reason): each logged once
        # Read by the self-metrics at scrape time: acknowledgements by status, rows stored, open streams.
        self.acks = {"stored": 0, "duplicate": 0, "rejected": 0}
        self.rows_stored = 0
        self.streams_open = 0

    def start_balancing(self) -> None:
        """With a balancer: its heartbeat and checks from now on (on the running event loop)."""
        if self.balancer is not None and self._balancing is None:
            self._balancing = asyncio.create_task(self._balance(self.balancer))

    def begin_shutdown(self) -> None:
        """Stop reading new batches; in-flight ones are still acknowledged."""
        self._closing.set()
        for binding in self._open_streams:
            binding.leave.set()
        if self._balancing is not None:
            self._balancing.cancel()
        if self.balancer is not None:
            self.balancer.leave()  # the other workers stop counting on this one at once
        if self._revocations is not None:
            self._revocations.cancel()

    async def _authorize(self, context: grpc.aio.ServicerContext, agent_id: str = "") -> Presented:
        presented = Presented.of(context.invocation_metadata())
        callers = self._callers(context, presented)
        if not self._is_verified(presented):
            retry_after = self.limiter.caller_retry_after(callers)
            if retry_after > 0:  # before any database work: a flood of bad calls costs a dict lookup each
                context.set_trailing_metadata((("retry-after", f"{retry_after:.1f}"),))
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    f"too many refused calls from this address or token: retry after {retry_after:.1f} s")
        if not self._auth.admits_call(presented):
            self.limiter.refused(callers)
            self._log_refusal(context, presented.agent_id or agent_id, "no token" if not presented.bearer else "a wrong token")
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token (metadata 'authorization: Bearer <token>')")
        return presented

    @staticmethod
    def _callers(context: grpc.aio.ServicerContext, presented: Presented) -> tuple[str, ...]:
        return presented.callers((context.peer() or "").rsplit(":", 1)[0])

    def _is_verified(self, presented: Presented) -> bool:
        known = self._verified.get(presented.agent_id) if presented.device_key else None
        return known is not None and known == sha256_hex(presented.device_key)

    def _verify(self, presented: Presented) -> None:
        if presented.device_key:
            if len(self._verified) >= 1_000_000:
                self._verified.clear()
            self._verified[presented.agent_id] = sha256_hex(presented.device_key)

    async def _refuse(self, context: grpc.aio.ServicerContext, presented: Presented, exc: IdentityRefused) -> None:
        """End a call refused by the identity check; the refusal counts against its caller (address,
        token), never against the agent id it claimed."""
        if exc.code != "resource_exhausted":
            self.limiter.refused(self._callers(context, presented))
        else:
            context.set_trailing_metadata((("retry-after", f"{exc.retry_after_s:.1f}"),))
        await context.abort(grpc_code(exc), str(exc))

    def _log_refusal(self, context: grpc.aio.ServicerContext, agent_id: str, reason: str) -> None:
        """One warning per agent (or address, before an agent names itself) and reason; never the token."""
        peer = (context.peer() or "").rsplit(":", 1)[0]
        key = (agent_id or peer, reason)
        if key in self._refusals_logged:
            return
        if len(self._refusals_logged) >= 10_000:  # a scan of many addresses: memory stays bounded
            self._refusals_logged.clear()
        self._refusals_logged.add(key)
        who = f"agent {agent_id!r} ({peer})" if agent_id else f"a client at {peer} (no agent id yet)"
        log.warning("refused %s: %s (said once per agent and reason)", who, reason)  # the reason never holds a token

    async def Register(self, request: pb.RegisterRequest | Undecodable, context: grpc.aio.ServicerContext) -> pb.RegisterResponse:
        presented = await self._authorize(context, "" if isinstance(request, Undecodable) else request.agent_id)
        received = time.time_ns()
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        assert isinstance(request, pb.RegisterRequest)  # abort() raised otherwise
        try:
            validate_registration(request, self._limits)
        except BatchInvalid as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"registration: {exc}")
        if self.balancer is not None and not self.balancer.admit(context.peer() or "", request.agent_id,
                                                                 connection_weight(len(request.inventory.gpus))):
            # Before the registration is written: an agent turned away costs nothing but a reconnect.
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{vocabulary.REBALANCE_DETAIL}: this worker holds more agents "
                                "than another; reconnect")
        # The agent's own allowance: only registrations that passed the identity check spent it.
        retry_after = self.limiter.registration_retry_after(request.agent_id)
        if retry_after > 0:
            context.set_trailing_metadata((("retry-after", f"{retry_after:.1f}"),))
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"too many registrations: retry after {retry_after:.1f} s")
        try:
            reg = await self.registrations.write(context.time_remaining(), register_device, self._engine, request,
                                                 received_ns=received,
                                                 authorize=self._auth.registration_check(presented, request),
                                                 liveness=self._writer.liveness)
        except RegistrationShed as exc:
            if exc.expired:  # the agent stopped waiting; it calls again
                await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "registration not written: its deadline passed while "
                                    "other agents' registrations were being written")
            context.set_trailing_metadata((("retry-after", f"{exc.retry_after_s:.1f}"),))
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{exc.waiting} registrations are waiting: retry after "
                                f"{exc.retry_after_s:.1f} s")
        except IdentityRefused as exc:
            self._log_refusal(context, request.agent_id, str(exc))  # once per agent and reason
            await self._refuse(context, presented, IdentityRefused(exc.code, f"registration refused: {exc}",
                                                                   retry_after_s=exc.retry_after_s))
        except IntegrityError:  # another client enrolled this agent id at the same moment
            self.limiter.refused(self._callers(context, presented))
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"agent {request.agent_id!r} was just enrolled by another client")
        except Exception as exc:
            log.warning("registration of %s failed: %s", request.agent_id, exc)
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"device registry unavailable: {exc}")
        self._device_ids[request.agent_id] = reg.device_id
        self.limiter.registered(request.agent_id)
        self._verify(presented)
        log.info("registered %s (%s) skew %.3f s", request.name, request.agent_id, reg.clock_skew_ns / 1e9)
        return pb.RegisterResponse(
            collector_version=COLLECTOR_VERSION,
            received_ns=received,
            clock_skew_ns=reg.clock_skew_ns,
            max_batch_bytes=self._max_batch_bytes,
            max_rows_per_batch=self._limits.max_rows,
            capabilities=list(CAPABILITIES),
        )

    async def _device_id(self, agent_id: str) -> int | None:
        device_id = self._device_ids.get(agent_id)
        if device_id is None:
            device_id = await asyncio.to_thread(lookup_device_id, self._engine, agent_id)
            if device_id is not None:
                self._device_ids[agent_id] = device_id
        return device_id

    async def _bind(self, binding: _StreamBinding, batch: pb.Batch, context: grpc.aio.ServicerContext) -> None:
        """Refuse a batch for any agent id but the stream's (PERMISSION_DENIED, nothing stored)."""
        if binding.agent_id is None:  # key-less: bound by its first batch, to an agent id nobody enrolled
            if not await asyncio.to_thread(self._auth.keyless_may_write, batch.agent_id):
                raise _Refused(grpc.StatusCode.PERMISSION_DENIED, f"agent {batch.agent_id!r} is enrolled: only its own device key may write as it")
            binding.agent_id = batch.agent_id
            self._streams_by_agent.setdefault(batch.agent_id, set()).add(binding.revoked)
        elif batch.agent_id != binding.agent_id:
            log.warning("stream of agent %r sent a batch as %r: refused", binding.agent_id, batch.agent_id)
            raise _Refused(grpc.StatusCode.PERMISSION_DENIED, f"this stream belongs to agent {binding.agent_id!r}, not {batch.agent_id!r}")

    def revoke_streams(self, agent_id: str) -> int:
        """End the open streams of ``agent_id`` now (PERMISSION_DENIED); returns how many."""
        events = self._streams_by_agent.pop(agent_id, set())
        for event in events:
            event.set()
        self._device_ids.pop(agent_id, None)
        self._verified.pop(agent_id, None)
        return len(events)

    async def _watch_revocations(self) -> None:
        """Poll the database for revoked devices (``fleetscope device revoke`` runs elsewhere).

        A revocation is a row the database numbers: the count of rows changes with each one,
        whatever the clock of the host that made it said (a timestamp from a laptop two minutes
        behind, or an hour ahead, once decided which revocations were looked at). When it
        changes, the agents with open streams here are checked against the revoked credentials,
        so a revocation committed out of order is found all the same.
        """
        seen = -1
        while True:
            try:
                count = await asyncio.to_thread(revocation_count, self._engine)
                if count != seen:
                    open_agents = list(self._streams_by_agent)
                    revoked = await asyncio.to_thread(revoked_among, self._engine, open_agents) if open_agents else set()
                    seen = count
                    for agent_id in revoked:
                        if self.revoke_streams(agent_id):
                            log.warning("agent %r revoked: its streams are closed", agent_id)
            except Exception as exc:  # the database is away: the next poll tries again
                log.debug("revocation poll failed: %s", exc)
            await asyncio.sleep(self._revocation_poll_s)

    async def _accept(self, batch: pb.Batch, context: grpc.aio.ServicerContext, binding: _StreamBinding | None = None) -> asyncio.Future:
        """Validate and hand to the writer; returns a future of the Ack."""
        received = time.time_ns()
        loop = asyncio.get_running_loop()
        try:
            # The agent id is a query key: a NUL or a 100,000-character id must not reach the database.
            check_batch_identity(batch, self._limits)
            # compact-v1 unfolds here, within bounds, before anything reads the batch's records.
            unfolded = expand_compact(batch, self._limits)
        except BatchInvalid as exc:
            self.rejected += 1
            done = loop.create_future()
            done.set_result(_rejected_ack(batch.seq, str(exc)))
            return done
        if binding is not None:
            await self._bind(binding, batch, context)
        self.limiter.trim_series(batch)  # points of series beyond the agent's cap are dropped, counted
        device_id = await self._device_id(batch.agent_id)
        if device_id is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"agent {batch.agent_id!r} is not registered: call Register first")
        placement = place_batch(batch, received_ns=received, anchors=self._boot_anchors, skew_tolerance_ns=self._skew_tolerance_ns)
        if placement.reanchored:
            self._note_reanchored(batch, placement.step_ns)
        item = WriteItem(
            batch=batch,
            device_id=device_id,  # type: ignore[arg-type]
            agent_id=batch.agent_id,
            boot_id=batch.boot_id,
            seq=batch.seq,
            received_ns=received,
            correction_ns=placement.correction_ns,
            clock_skew_ns=placement.clock_skew_ns,
            # Stored on the device row (batches_reanchored, last_clock_step_ns) with the batch.
            clock_step_ns=(placement.step_ns or 1) if placement.reanchored else 0,
            compact_sections=unfolded.sections if unfolded is not None else None,
        )
        try:
            # Checked on the rows' own clock: a step of the device's clock is never a reason to reject.
            item.decoded = validate_batch(
                batch, self._limits, sent_on_rows_clock_ns=placement.sent_on_rows_clock_ns, unfolded=unfolded
            )
        except BatchInvalid as exc:
            self.rejected += 1
            log.warning("rejected batch %d from %s: %s", batch.seq, batch.agent_id, exc)
            item.batch = None
            item.rejection = f"batch {batch.seq}: {exc}"
            self._writer.submit(item)  # recorded on the device row; the ack does not wait for it
            done = loop.create_future()
            done.set_result(_rejected_ack(batch.seq, str(exc)))
            return done
        self._writer.prepare(item)
        return asyncio.wrap_future(self._writer.submit(item), loop=loop)

    def _note_reanchored(self, batch: pb.Batch, step_ns: int) -> None:
        self.reanchored += 1
        stream = (batch.agent_id, batch.boot_id)
        last = self._logged_steps.get(stream)
        if last is None or abs(step_ns - last) > self._skew_tolerance_ns:  # once per step, not per batch
            self._logged_steps[stream] = step_ns
            log.info("agent %s boot %s: clock stepped %+.1f s after batch %d was spooled; placed by its monotonic clock",
                     batch.agent_id, batch.boot_id, step_ns / 1e9, batch.seq)

    async def Stream(self, request_iterator: AsyncIterator[pb.Batch | Undecodable], context: grpc.aio.ServicerContext) -> AsyncIterator[pb.Ack]:
        presented = await self._authorize(context)
        try:
            credential = await asyncio.to_thread(self._auth.stream_agent, presented)
        except IdentityRefused as exc:
            await self._refuse(context, presented, exc)
        binding = _StreamBinding(None if credential is None else credential.agent_id, quota_group(credential),
                                 peer=context.peer() or "")
        if credential is not None:
            self._verify(presented)
        if binding.agent_id is not None:
            self._streams_by_agent.setdefault(binding.agent_id, set()).add(binding.revoked)
        if self._revocations is None:
            self._revocations = asyncio.create_task(self._watch_revocations())
        pending: asyncio.Queue = asyncio.Queue()
        unacked = _UnackedBytes(self._max_unacked_bytes_per_stream)
        self.streams_open += 1
        peer = binding.peer
        self._open_streams.add(binding)
        if self._closing.is_set():
            binding.leave.set()
        if self.balancer is not None:
            self.balancer.opened(peer)

        async def read() -> None:
            batches = request_iterator.__aiter__()
            estimate = _FIRST_BATCH_ESTIMATE
            try:
                while True:
                    # Wait for room in the collector-wide budget before reading: nothing is read
                    # while the writer is behind, so the bytes held stay near the cap.
                    reservation = await self.budget.admit(estimate)
                    try:
                        batch = await batches.__anext__()
                    except BaseException:  # the stream ended (StopAsyncIteration), broke or was cancelled
                        self.budget.unreserve(reservation)
                        raise
                    if isinstance(batch, Undecodable):
                        # No seq to acknowledge it by: the batches before it are acknowledged, then
                        # the stream ends with INVALID_ARGUMENT (see ``_ack``).
                        self.budget.unreserve(reservation)
                        await pending.put(batch)
                        break
                    size = estimate = batch.ByteSize()
                    release = self.budget.hold(size, reservation)
                    try:
                        accepted = await self._accept(batch, context, binding)
                    except BaseException:
                        release()
                        raise
                    accepted.add_done_callback(_call_with_nothing(release))
                    unacked.hold(size, until=accepted)
                    await pending.put(accepted)
                    pause = self.limiter.batch_delay(batch.agent_id, size)
                    if binding.group is not None:
                        pause = max(pause, self.limiter.quota_delay(binding.group, batch.agent_id, size))
                    if pause > 0:  # over its rate, or its token's: this agent's stream is not read meanwhile
                        await asyncio.sleep(pause)
                    # Read the next batch only once the writer has caught up: HTTP/2 flow control
                    # then holds a fast client back, not this process's memory.
                    await unacked.wait_for_room()
                    if binding.leave.is_set():
                        break
            except StopAsyncIteration:
                pass
            except DecodeError as exc:
                # The generated registration deserialises in gRPC's receive loop, which raises
                # here; without this the stream would end with UNKNOWN "Unexpected DecodeError".
                await pending.put(Undecodable(f"request is not a valid {pb.Batch.DESCRIPTOR.full_name} message: {exc}"))
            finally:
                await pending.put(None)

        reader = asyncio.create_task(read())
        leave = asyncio.create_task(binding.leave.wait())
        revoked = asyncio.create_task(binding.revoked.wait())
        try:
            while True:
                if not pending.empty() and not binding.revoked.is_set() and not binding.leave.is_set():
                    # A batch is already waiting for its acknowledgement: no task and no wait on
                    # three futures for it (the common case while a backlog streams in).
                    fut = pending.get_nowait()
                else:
                    getter = asyncio.create_task(pending.get())
                    done, _ = await asyncio.wait({getter, leave, revoked}, return_when=asyncio.FIRST_COMPLETED)
                    if revoked in done:
                        getter.cancel()
                        reader.cancel()
                        await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"agent {binding.agent_id!r} was revoked")
                    if getter not in done:
                        getter.cancel()
                        reader.cancel()
                        # Acknowledge what was already accepted, then end the stream: cleanly when the
                        # collector stops, UNAVAILABLE when asked to leave for another worker.
                        while not pending.empty():
                            fut = pending.get_nowait()
                            if fut is not None:
                                yield await self._ack(fut, context)
                        if binding.shed and not self._closing.is_set():
                            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{vocabulary.REBALANCE_DETAIL}: "
                                                "another worker holds fewer agents; reconnect")
                        return
                    fut = getter.result()
                if fut is None:
                    try:
                        await reader  # finishing: how it ended (a refusal, an abort) ends the call
                    except _Refused as exc:
                        await context.abort(exc.code, exc.message)
                    return
                yield await self._ack(fut, context)
        finally:
            self.streams_open -= 1
            self._open_streams.discard(binding)
            if self.balancer is not None:
                self.balancer.closed(peer)
            reader.cancel()
            leave.cancel()
            revoked.cancel()
            if binding.agent_id is not None:
                self._streams_by_agent.get(binding.agent_id, set()).discard(binding.revoked)

    async def _balance(self, balancer: StreamBalancer) -> None:
        """Every ``check_s``: ask streams to leave while this worker carries more than another by
        more than the slack (``StreamBalancer.choose_to_shed``), each agent a few times a window
        at most; the newest streams first (the ones that have sent the least of a backlog)."""
        while not self._closing.is_set():
            try:
                balancer.heartbeat()
                await asyncio.sleep(balancer.check_s)
                streams = [(b, b.agent_id, b.peer) for b in sorted(self._open_streams, key=lambda b: -b.opened)
                           if not b.leave.is_set()]
                leaving = balancer.choose_to_shed(streams)
            except Exception as exc:  # the loads file went away: balancing stops, ingest goes on
                log.warning("worker balancing stopped: %s", exc)
                return
            for binding in leaving:
                binding.shed = True
                binding.leave.set()

    async def _ack(self, fut: asyncio.Future | Undecodable, context: grpc.aio.ServicerContext) -> pb.Ack:
        if isinstance(fut, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, fut.reason)
        assert isinstance(fut, asyncio.Future)
        try:
            result = await fut
        except StoreUnavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"storage unavailable, batch kept by the agent: {exc}")
        if isinstance(result, pb.Ack):
            self.acks["rejected"] += 1
            return result
        assert isinstance(result, WriteOutcome)
        if result.rejection is not None:  # the database refused this batch's data: never resend it
            self.acks["rejected"] += 1
            return _rejected_ack(result.seq, result.rejection)
        if result.duplicate:
            self.acks["duplicate"] += 1
            return pb.Ack(seq=result.seq, status=pb.Ack.STATUS_DUPLICATE, rows=result.rows)
        self.acks["stored"] += 1
        self.rows_stored += result.rows
        return pb.Ack(seq=result.seq, status=pb.Ack.STATUS_STORED, rows=result.rows)


def _rejected_ack(seq: int, reason: str) -> pb.Ack:
    return pb.Ack(seq=seq, status=pb.Ack.STATUS_REJECTED, code=grpc.StatusCode.INVALID_ARGUMENT.value[0], reason=reason)


class _Refused(Exception):
    """Raised by a stream's reader; the handler ends the call with ``code`` (gRPC's abort only
    works from the handler's own task)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(eq=False)  # one per stream, kept in a set by identity
class _StreamBinding:
    """The agent id a stream may write as (None until a key-less stream's first batch), and the
    event that ends it when that agent is revoked."""

    agent_id: str | None
    group: str | None  # whose ingest quota it draws on (identity.quota_group); None: none
    revoked: asyncio.Event = field(default_factory=asyncio.Event)
    # Set when the stream should stop reading and end (the collector stops, or ``shed``: asked to
    # leave for a less loaded worker).
    leave: asyncio.Event = field(default_factory=asyncio.Event)
    shed: bool = False
    opened: float = field(default_factory=time.monotonic)
    peer: str = ""  # the connection's address (context.peer()), the balancer's key for it


@dataclass(frozen=True)
class Undecodable:
    """A request whose bytes are not the message they claim to be (random bytes, invalid UTF-8).

    gRPC deserialises each request before the handler sees it, and a deserialiser that raises
    ends the call with UNKNOWN "Unexpected DecodeError"; the handlers get this instead and end
    the call with INVALID_ARGUMENT and this reason.
    """

    reason: str


def _tolerant(message: type[pb.Batch] | type[pb.RegisterRequest]) -> Callable[[bytes], object]:
    name = message.DESCRIPTOR.full_name

    def deserialize(data: bytes) -> object:
        try:
            return message.FromString(data)
        except DecodeError as exc:
            return Undecodable(f"request is not a valid {name} message ({len(data)} bytes): {exc}")

    return deserialize


def add_ingest_service(service: IngestService, server: grpc.aio.Server) -> None:
    """Register ``service`` on ``server``, as ``telemetry_pb2_grpc.add_IngestServicer_to_server``
    does, but with deserialisers that turn undecodable bytes into ``Undecodable``."""
    handlers = {
        "Register": grpc.unary_unary_rpc_method_handler(
            service.Register, request_deserializer=_tolerant(pb.RegisterRequest), response_serializer=pb.RegisterResponse.SerializeToString
        ),
        "Stream": grpc.stream_stream_rpc_method_handler(
            service.Stream, request_deserializer=_tolerant(pb.Batch), response_serializer=pb.Ack.SerializeToString
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("fleetscope.v1.Ingest", handlers),))
    server.add_registered_method_handlers("fleetscope.v1.Ingest", handlers)


class _UnackedBytes:
    """The bytes of one stream's batches that are accepted but not yet written, against a cap."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._bytes = 0
        self._room = asyncio.Event()
        self._room.set()

    def hold(self, size: int, *, until: asyncio.Future) -> None:
        """Count ``size`` bytes until the future of their batch is done."""
        self._bytes += size
        if self._bytes >= self._cap:
            self._room.clear()

        def release(_done: asyncio.Future) -> None:
            self._bytes -= size
            if self._bytes < self._cap:
                self._room.set()

        until.add_done_callback(release)

    async def wait_for_room(self) -> None:
        await self._room.wait()


def _call_with_nothing(release: Callable[[], None]) -> Callable[[asyncio.Future], None]:
    """``release`` as a future's done callback (which is passed the future)."""

    def on_done(done: asyncio.Future) -> None:
        release()
        if not done.cancelled():
            # Seen here: when a stream ends on StoreUnavailable, the failures of the batches
            # queued behind the first are never awaited, and asyncio would log each one as an
            # error ("Future exception was never retrieved"); the agent resends them all.
            done.exception()

    return on_done


_FIRST_BATCH_ESTIMATE = 64 << 10  # a stream's next batch is taken to be as large as its last; its first, this


class IngestBudget:
    """The bytes of batches read from all streams and not yet acknowledged, against ``cap``.

    A reader asks ``admit`` for room before it reads a batch, with an estimate of its size (the
    stream's previous batch), and turns the reservation into the batch's real size with ``hold``
    once read. Readers are admitted in arrival order, each only while the bytes held and reserved
    are under the cap, so the bytes held pass the cap by at most the misjudged part of the
    batches admitted last, not by a batch per stream; a reader admitted that then waits for its
    agent (which has nothing to send) holds back only its own estimate.
    """

    def __init__(self, cap: int) -> None:
        self.cap = max(1, cap)
        self.held = 0
        self.reserved = 0
        self.peak = 0  # the most bytes held at once (read by tests and benchmarks)
        self.waiting = 0  # readers waiting for room now
        self._waiters: deque[tuple[asyncio.Future, int]] = deque()

    def _has_room(self) -> bool:
        return self.held + self.reserved < self.cap

    async def admit(self, estimate: int) -> int:
        """Wait for room for a batch of about ``estimate`` bytes; returns the reservation."""
        if not self._waiters and self._has_room():
            self.reserved += estimate
            return estimate
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        entry = (fut, estimate)
        self._waiters.append(entry)
        self.waiting += 1
        try:
            await fut  # _wake reserved ``estimate`` for this reader when it set the result
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.unreserve(estimate)  # admitted and cancelled in one step
            elif entry in self._waiters:
                self._waiters.remove(entry)
            raise
        finally:
            self.waiting -= 1
        return estimate

    def unreserve(self, reservation: int) -> None:
        self.reserved -= reservation
        self._wake()

    def hold(self, size: int, reservation: int) -> Callable[[], None]:
        """Count a read batch's ``size`` in place of its reservation; returns the release (idempotent)."""
        self.reserved -= reservation
        self.held += size
        self.peak = max(self.peak, self.held)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.held -= size
                self._wake()

        self._wake()  # the batch may be smaller than its estimate
        return release

    def _wake(self) -> None:
        while self._waiters and self._has_room():
            fut, estimate = self._waiters.popleft()
            if not fut.done():
                self.reserved += estimate
                fut.set_result(None)
