"""The agent's side of the SDK: a gRPC ``Local`` service on a Unix socket.

Programs on the device (``fleetscope.agent.sdk``) send ``SdkReport``s here; each one is handed
to ``sink`` as it arrives, on one of the server's few worker threads, and acknowledged with the
number of records it held. The sink must be quick (put the content on a queue): the SDK waits at
most its RPC deadline (1 s) and drops the report after that.

Access control is the filesystem's: the socket's directory is created with mode 0o770, so only
the agent's user and group can reach it; add a program's user to the group to let it report.
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import socket as socket_module
import stat
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from fleetscope.proto.v1 import telemetry_pb2, telemetry_pb2_grpc

log = logging.getLogger(__name__)

# sun_path is 108 bytes on Linux (104 on macOS) including the terminating NUL.
MAX_SOCKET_PATH = 107
DIRECTORY_MODE = 0o770
SOCKET_MODE = 0o660
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def report_records(report: telemetry_pb2.SdkReport) -> int:
    """How many records one report carries (what SdkAck.accepted counts)."""
    return (
        len(report.latency)
        + len(report.metrics)
        + len(report.logs)
        + len(report.incidents)
        + len(report.inventory_records)
    )


class _LocalServicer(telemetry_pb2_grpc.LocalServicer):
    def __init__(self, sink: Callable[[telemetry_pb2.SdkReport], None]) -> None:
        self._sink = sink

    def Report(self, request: telemetry_pb2.SdkReport, context: Any) -> telemetry_pb2.SdkAck:  # noqa: N802
        try:
            self._sink(request)
        except Exception:
            # The SDK counts a failed RPC as dropped records, which is the truth here.
            log.exception("sink failed on a report from pid %d", request.process.pid)
            context.abort(grpc.StatusCode.INTERNAL, "the agent could not take this report")
        return telemetry_pb2.SdkAck(accepted=report_records(request))


def _socket_is_live(path: str) -> bool:
    probe = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(path)
        return True
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return False
        raise
    finally:
        probe.close()


def prepare_socket_path(socket_path: str) -> None:
    """Make the directory (0o770) and clear a stale socket left by a process that died.

    A socket that still accepts connections belongs to a running server and is kept (binding
    then fails, which is what must happen); anything that is not a socket is never removed.
    """
    directory = os.path.dirname(os.path.abspath(socket_path))
    if not os.path.isdir(directory):
        os.makedirs(directory, exist_ok=True)
        # makedirs applies the umask; the mode is part of the access control, so set it exactly.
        os.chmod(directory, DIRECTORY_MODE)
    try:
        st = os.lstat(socket_path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise FileExistsError(f"{socket_path} exists and is not a socket; not removing it")
    if _socket_is_live(socket_path):
        raise OSError(errno.EADDRINUSE, f"another server is listening on {socket_path}")
    os.unlink(socket_path)


_running: weakref.WeakSet[LocalReportServer] = weakref.WeakSet()


@atexit.register
def _stop_running_servers() -> None:
    # A grpc server still running when the interpreter finalizes can hang the process in its
    # destructor (gRPC's completion queue waits in epoll from inside the garbage collector).
    for server in list(_running):
        try:
            server.stop(0)
        except Exception:
            pass


class LocalReportServer:
    """Serve ``fleetscope.v1.Local`` on ``unix:socket_path``, calling ``sink(report)`` per report."""

    def __init__(
        self,
        socket_path: str,
        sink: Callable[[telemetry_pb2.SdkReport], None],
        *,
        max_workers: int = 2,
    ) -> None:
        path = os.path.abspath(socket_path)
        if len(path.encode()) > MAX_SOCKET_PATH:
            raise ValueError(
                f"socket path is {len(path.encode())} bytes, over the {MAX_SOCKET_PATH} a Unix socket allows: {path}"
            )
        self.socket_path = path
        self._sink = sink
        self._max_workers = max_workers
        self._server: grpc.Server | None = None

    @property
    def target(self) -> str:
        """The gRPC target clients use: ``unix:///abs/path``."""
        return "unix://" + self.socket_path

    def start(self) -> None:
        if self._server is not None:
            return
        prepare_socket_path(self.socket_path)
        server = grpc.server(
            ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="fleetscope-local"),
            options=(("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),),
        )
        telemetry_pb2_grpc.add_LocalServicer_to_server(_LocalServicer(self._sink), server)
        try:
            port = server.add_insecure_port("unix:" + self.socket_path)
        except RuntimeError as exc:
            raise OSError(f"cannot bind unix:{self.socket_path}: {exc}") from exc
        if port == 0:
            raise OSError(f"cannot bind unix:{self.socket_path}")
        server.start()
        try:
            os.chmod(self.socket_path, SOCKET_MODE)
        except OSError:
            pass
        self._server = server
        _running.add(self)

    def stop(self, grace: float | None = 1.0) -> None:
        """Stop taking reports; in-flight ones get ``grace`` seconds. Removes the socket file."""
        server, self._server = self._server, None
        if server is None:
            return
        _running.discard(self)
        # Bounded: a sink stuck in Python code must not hang the agent's shutdown.
        server.stop(grace).wait(None if grace is None else grace + 2.0)
        try:
            if stat.S_ISSOCK(os.lstat(self.socket_path).st_mode):
                os.unlink(self.socket_path)
        except OSError:
            pass

    def __enter__(self) -> LocalReportServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
