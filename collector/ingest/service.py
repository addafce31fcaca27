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
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError
from sqlalchemy import Engine

from fleetscope.collector.errors import BatchInvalid, StoreUnavailable
from fleetscope.collector.ingest.clocks import BootAnchors, place_batch
from fleetscope.collector.ingest.validation import (
    Limits,
    check_batch_identity,
    validate_batch,
    validate_registration,
)
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
    ) -> None:
        self._engine = engine
        self._writer = writer
        self._tokens = tokens
        self._limits = limits or Limits()
        self._max_batch_bytes = max_batch_bytes
        self._skew_tolerance_ns = skew_tolerance_ns
        self._boot_anchors = BootAnchors()
        self._logged_steps: dict[tuple[str, str], int] = {}  # per stream, the clock step last logged
        self.reanchored = 0  # batches placed by the monotonic clock after a step of the device's clock
        self._max_unacked_bytes_per_stream = max_unacked_bytes_per_stream
        self._device_ids: dict[str, int] = {}
        self._closing = asyncio.Event()
        self.rejected = 0

    def begin_shutdown(self) -> None:
        """Stop reading new batches; in-flight ones are still acknowledged."""
        self._closing.set()

    async def _authorize(self, context: grpc.aio.ServicerContext) -> None:
        if self._tokens is None:
            return
        token = ""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and value.startswith("Bearer "):
                token = value[len("Bearer ") :]
        if not any(hmac.compare_digest(token, t) for t in self._tokens):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token (metadata 'authorization: Bearer <token>')")

    async def Register(self, request: pb.RegisterRequest | Undecodable, context: grpc.aio.ServicerContext) -> pb.RegisterResponse:
        await self._authorize(context)
        received = time.time_ns()
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        assert isinstance(request, pb.RegisterRequest)  # abort() raised otherwise
        try:
            validate_registration(request, self._limits)
        except BatchInvalid as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"registration: {exc}")
        try:
            reg = await asyncio.to_thread(register_device, self._engine, request, received_ns=received)
        except Exception as exc:
            log.warning("registration of %s failed: %s", request.agent_id, exc)
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"device registry unavailable: {exc}")
        self._device_ids[request.agent_id] = reg.device_id
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

    async def _accept(self, batch: pb.Batch, context: grpc.aio.ServicerContext) -> asyncio.Future:
        """Validate and hand to the writer; returns a future of the Ack."""
        received = time.time_ns()
        loop = asyncio.get_running_loop()
        try:
            # The agent id is a query key: a NUL or a 100,000-character id must not reach the database.
            check_batch_identity(batch, self._limits)
        except BatchInvalid as exc:
            self.rejected += 1
            done = loop.create_future()
            done.set_result(_rejected_ack(batch.seq, str(exc)))
            return done
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
        )
        try:
            # Checked on the rows' own clock: a step of the device's clock is never a reason to reject.
            item.decoded = validate_batch(batch, self._limits, sent_on_rows_clock_ns=placement.sent_on_rows_clock_ns)
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
        await self._authorize(context)
        pending: asyncio.Queue = asyncio.Queue()
        unacked = _UnackedBytes(self._max_unacked_bytes_per_stream)

        async def read() -> None:
            try:
                async for batch in request_iterator:
                    if isinstance(batch, Undecodable):
                        # No seq to acknowledge it by: the batches before it are acknowledged, then
                        # the stream ends with INVALID_ARGUMENT (see ``_ack``).
                        await pending.put(batch)
                        break
                    size = batch.ByteSize()
                    accepted = await self._accept(batch, context)
                    unacked.hold(size, until=accepted)
                    await pending.put(accepted)
                    # Read the next batch only once the writer has caught up: HTTP/2 flow control
                    # then holds a fast client back, not this process's memory.
                    await unacked.wait_for_room()
                    if self._closing.is_set():
                        break
            except DecodeError as exc:
                # The generated registration deserialises in gRPC's receive loop, which raises
                # here; without this the stream would end with UNKNOWN "Unexpected DecodeError".
                await pending.put(Undecodable(f"request is not a valid {pb.Batch.DESCRIPTOR.full_name} message: {exc}"))
            finally:
                await pending.put(None)

        reader = asyncio.create_task(read())
        closing = asyncio.create_task(self._closing.wait())
        try:
            while True:
                getter = asyncio.create_task(pending.get())
                done, _ = await asyncio.wait({getter, closing}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    reader.cancel()
                    # Acknowledge what was already accepted, then end the stream cleanly.
                    while not pending.empty():
                        fut = pending.get_nowait()
                        if fut is not None:
                            yield await self._ack(fut, context)
                    return
                fut = getter.result()
                if fut is None:
                    if reader.done() and reader.exception() is not None:
                        raise reader.exception()  # type: ignore[misc]
                    return
                yield await self._ack(fut, context)
        finally:
            reader.cancel()
            closing.cancel()

    async def _ack(self, fut: asyncio.Future | Undecodable, context: grpc.aio.ServicerContext) -> pb.Ack:
        if isinstance(fut, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, fut.reason)
        assert isinstance(fut, asyncio.Future)
        try:
            result = await fut
        except StoreUnavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"storage unavailable, batch kept by the agent: {exc}")
        if isinstance(result, pb.Ack):
            return result
        assert isinstance(result, WriteOutcome)
        if result.rejection is not None:  # the database refused this batch's data: never resend it
            return _rejected_ack(result.seq, result.rejection)
        status = pb.Ack.STATUS_DUPLICATE if result.duplicate else pb.Ack.STATUS_STORED
        return pb.Ack(seq=result.seq, status=status, rows=result.rows)


def _rejected_ack(seq: int, reason: str) -> pb.Ack:
    return pb.Ack(seq=seq, status=pb.Ack.STATUS_REJECTED, code=grpc.StatusCode.INVALID_ARGUMENT.value[0], reason=reason)


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
