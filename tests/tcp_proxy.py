"""A loopback TCP forwarder a test can cut and restore, to play a network outage for real, and
slow down (``rate_up``/``rate_down``, bytes a second) to play a thin radio or cellular link."""

from __future__ import annotations

import socket
import threading
import time


class _Link:
    """One direction of the link: a rate (None: unlimited) that every connection shares, and
    the bytes it carried. A chunk leaves once the link had the time to carry it."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.bytes = 0
        self._free_at = 0.0  # when the link has carried what it was given
        self._lock = threading.Lock()

    def chunk_size(self) -> int:
        rate = self.rate
        return 65536 if rate is None else max(256, min(65536, int(rate / 50)))  # ~20 ms a chunk

    def carry(self, n: int) -> None:
        with self._lock:
            rate = self.rate
            if rate is None:
                self.bytes += n
                return
            now = time.monotonic()
            self._free_at = max(now, self._free_at) + n / rate
            delay = self._free_at - now
        if delay > 0:
            time.sleep(delay)
        with self._lock:
            self.bytes += n

    def set_rate(self, rate: float | None) -> None:
        with self._lock:
            self.rate = rate
            self._free_at = min(self._free_at, time.monotonic())


class TcpProxy:
    def __init__(self, target: tuple[str, int], *, rate_up: float | None = None, rate_down: float | None = None) -> None:
        """``rate_up`` (client to target) and ``rate_down``: bytes a second, None for unlimited."""
        self.target = target
        self._up, self._down = _Link(rate_up), _Link(rate_down)
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = False
        self._stopped = False
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def bytes_up(self) -> int:
        """Bytes carried from clients to the target so far."""
        return self._up.bytes

    @property
    def bytes_down(self) -> int:
        return self._down.bytes

    def set_rate(self, *, up: float | None, down: float | None) -> None:
        """Change the link's rates (bytes a second, None: unlimited), for every connection, now."""
        self._up.set_rate(up)
        self._down.set_rate(down)

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
            for a, b, link in ((client, upstream, self._up), (upstream, client, self._down)):
                threading.Thread(target=self._pump, args=(a, b, link), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, link: _Link) -> None:
        try:
            while True:
                data = src.recv(link.chunk_size())
                if not data:
                    break
                link.carry(len(data))
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
