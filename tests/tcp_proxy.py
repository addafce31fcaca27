"""A loopback TCP forwarder a test can cut and restore, to play a network outage for real."""

from __future__ import annotations

import socket
import threading


class TcpProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = False
        self._stopped = False
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TcpProxy:
        self._listen(0)
        return self

    def _listen(self, port: int) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(64)
        self.port = s.getsockname()[1]
        self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self._cut:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """Drop every connection and refuse new ones (the port stops listening)."""
        self._cut = True
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            for c in self._conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # a pump already shut it down when its peer went away: it still needs closing
                c.close()
            self._conns.clear()

    def restore(self) -> None:
        self._cut = False
        self._listen(self.port)

    def stop(self) -> None:
        self.cut()
