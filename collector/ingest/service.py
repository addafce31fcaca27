"""The gRPC ingest service: authentication, validation, hand-off to the writer, acknowledgements.

Each agent holds one ``Stream``. Batches are validated on arrival; a valid one goes to the
group-commit writer and its acknowledgement is sent when its transaction committed. An
invalid one is acknowledged at once as REJECTED with INVALID_ARGUMENT and the field at fault,
and the stream goes on: one bad batch never disturbs the agent's others, or other agents.

Clock skew: every batch carries ``sent_ns`` (device clock at send). ``received - sent`` is the
skew plus the network delay; when it exceeds ``skew_tolerance_ns`` (a device whose clock is
off, typically a Jetson without an RTC before NTP) the batch's timestamps are shifted onto the
collector's clock, so "the last hour" means the same on every device.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import AsyncIterator

import grpc
from sqlalchemy import Engine

from fleetscope.collector.errors import BatchInvalid, StoreUnavailable
from fleetscope.collector.ingest.validation import Limits, validate_batch
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
    ) -> None:
        self._engine = engine
        self._writer = writer
        self._tokens = tokens
        self._limits = limits or Limits()
        self._max_batch_bytes = max_batch_bytes
        self._skew_tolerance_ns = skew_tolerance_ns
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

    async def Register(self, request: pb.RegisterRequest, context: grpc.aio.ServicerContext) -> pb.RegisterResponse:
        await self._authorize(context)
        received = time.time_ns()
        if not request.agent_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "agent_id: is empty")
        for field_name, value in (("name", request.name), ("hostname", request.hostname)):
            if len(value) > self._limits.max_name_chars:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{field_name}: longer than {self._limits.max_name_chars}")
        if len(request.labels) > self._limits.max_labels:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"labels: more than {self._limits.max_labels}")
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
        device_id = await self._device_id(batch.agent_id)
        if device_id is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"agent {batch.agent_id!r} is not registered: call Register first")
        skew = received - batch.sent_ns if batch.sent_ns else 0
        item = WriteItem(
            batch=batch,
            device_id=device_id,  # type: ignore[arg-type]
            agent_id=batch.agent_id,
            boot_id=batch.boot_id,
            seq=batch.seq,
            received_ns=received,
            correction_ns=skew if abs(skew) > self._skew_tolerance_ns else 0,
            clock_skew_ns=skew,
        )
        try:
            item.decoded = validate_batch(batch, self._limits)
        except BatchInvalid as exc:
            self.rejected += 1
            log.warning("rejected batch %d from %s: %s", batch.seq, batch.agent_id, exc)
            item.batch = None
            item.rejection = f"batch {batch.seq}: {exc}"
            self._writer.submit(item)  # recorded on the device row; the ack does not wait for it
            done = loop.create_future()
            done.set_result(
                pb.Ack(seq=batch.seq, status=pb.Ack.STATUS_REJECTED, code=grpc.StatusCode.INVALID_ARGUMENT.value[0], reason=str(exc))
            )
            return done
        self._writer.prepare(item)
        return asyncio.wrap_future(self._writer.submit(item), loop=loop)

    async def Stream(self, request_iterator: AsyncIterator[pb.Batch], context: grpc.aio.ServicerContext) -> AsyncIterator[pb.Ack]:
        await self._authorize(context)
        pending: asyncio.Queue = asyncio.Queue()

        async def read() -> None:
            try:
                async for batch in request_iterator:
                    await pending.put(await self._accept(batch, context))
                    if self._closing.is_set():
                        break
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

    async def _ack(self, fut: asyncio.Future, context: grpc.aio.ServicerContext) -> pb.Ack:
        try:
            result = await fut
        except StoreUnavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"storage unavailable, batch kept by the agent: {exc}")
        if isinstance(result, pb.Ack):
            return result
        assert isinstance(result, WriteOutcome)
        status = pb.Ack.STATUS_DUPLICATE if result.duplicate else pb.Ack.STATUS_STORED
        return pb.Ack(seq=result.seq, status=status, rows=result.rows)
