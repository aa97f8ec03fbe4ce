"""A TCP proxy of the fault tests, between the platform and a dependency (a database, the S3
server, a webhook receiver): it listens on 127.0.0.1 (a free port) and forwards each connection to
its target, until the test arms a fault:

- ``drop``: both sides of every open connection are closed (FIN), as a server restart does;
- ``reset``: both sides are reset (RST: SO_LINGER 0), as a firewall or a crashed host does;
- ``stall``: nothing more is forwarded, the sockets held open (a hung server, a lost route);
- ``refuse``: new connections are refused (the listening socket is closed; the port answers RST).

A fault lands once ``after_bytes`` more bytes have passed (both directions counted), so it can hit
a connection in the middle of a COPY or a result set; ``fired`` is set when it did. By default a
fault strikes once (``drop``, ``reset``: the connections open at that moment; new ones pass);
``refuse`` and ``stall`` hold until :meth:`TcpProxy.heal`.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

FAULTS = ("drop", "reset", "stall", "refuse")



def _readable(sock: socket.socket, timeout: float) -> bool:
    """Whether ``sock`` has something to read (or is closed) within ``timeout`` seconds. ``poll``,
    not ``select``: a test session holds more than FD_SETSIZE (1024) descriptors, and ``select``
    refuses a descriptor above it."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(timeout * 1000))

class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._fault: str | None = None
        self._remaining = 0
        self._stalled = False
        self._closed = False
        self.fired = threading.Event()
        self.fired_at: float | None = None
        self.bytes_forwarded = 0
        self.connections = 0
        self._listener = self._listen(0)
        self.port = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"tcp-proxy-{self.port}", daemon=True)
        self._acceptor.start()

    # -- the test's controls ---------------------------------------------------------------------

    def fault(self, kind: str, *, after_bytes: int = 0) -> None:
        """Arm ``kind`` (one of :data:`FAULTS`) to strike once ``after_bytes`` more bytes passed."""
        assert kind in FAULTS, kind
        with self._lock:
            self.fired.clear()
            self.fired_at = None
            self._fault, self._remaining = kind, after_bytes
        if after_bytes <= 0:
            self._strike()

    def heal(self) -> None:
        """Forward again: a refusing proxy listens again (on the same port), stalled connections
        are closed (their clients see them drop), nothing armed stays armed."""
        with self._lock:
            self._fault = None
            stalled, self._stalled = self._stalled, False
            pairs = list(self._pairs) if stalled else []
            relisten = self._listener is None and not self._closed
        for pair in pairs:
            self._close_pair(pair, reset=False)
        if relisten:
            listener = self._listen(self.port)
            with self._lock:
                self._listener = listener

    def close(self) -> None:
        with self._lock:
            self._closed = True
            listener, self._listener = self._listener, None
            pairs = list(self._pairs)
        if listener is not None:
            listener.close()
        for pair in pairs:
            self._close_pair(pair, reset=False)
        self._acceptor.join(5)

    # -- forwarding ------------------------------------------------------------------------------

    @staticmethod
    def _listen(port: int) -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
        return listener

    def _accept_loop(self) -> None:
        while not self._closed:
            listener = self._listener
            if listener is None:
                time.sleep(0.02)
                continue
            try:
                if not _readable(listener, 0.05):
                    continue
                client, _ = listener.accept()
            except (OSError, ValueError):  # closed by refuse() or close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                self._close_pair((client, client), reset=True)
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = (client, upstream)
            with self._lock:
                self._pairs.append(pair)
                self.connections += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True).start()

    def _pump(self, pair, src: socket.socket, dst: socket.socket) -> None:
        while True:
            if self._stalled:
                time.sleep(0.02)
                if pair not in self._pairs:
                    return
                continue
            try:
                if not _readable(src, 0.05):
                    if src.fileno() < 0:
                        return
                    continue
                data = src.recv(65536)
            except (OSError, ValueError):
                data = b""
            if not data:
                self._close_pair(pair, reset=False)
                return
            if self._stalled:  # read just before the stall: hold it
                continue
            strike = False
            with self._lock:
                self.bytes_forwarded += len(data)
                if self._fault is not None and not self.fired.is_set():
                    self._remaining -= len(data)
                    strike = self._remaining <= 0
            if strike:
                self._strike()
                if self._fault in ("stall", "drop", "reset"):
                    if self._fault != "stall":
                        return
                    continue
            try:
                dst.sendall(data)
            except OSError:
                self._close_pair(pair, reset=False)
                return

    def _strike(self) -> None:
        with self._lock:
            kind = self._fault
            if kind is None or self.fired.is_set():
                return
            pairs = list(self._pairs)
            if kind == "stall":
                self._stalled = True
            listener = None
            if kind == "refuse":
                listener, self._listener = self._listener, None
            self.fired_at = time.monotonic()
            self.fired.set()
            if kind in ("drop", "reset"):
                self._fault = None  # once: new connections pass
        if listener is not None:
            listener.close()
        if kind in ("drop", "reset"):
            for pair in pairs:
                self._close_pair(pair, reset=kind == "reset")

    def _close_pair(self, pair, *, reset: bool) -> None:
        with self._lock:
            if pair in self._pairs:
                self._pairs.remove(pair)
        for s in pair:
            try:
                if reset:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@contextmanager
def tcp_proxy(target_host: str, target_port: int) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target_host, target_port)
    try:
        yield proxy
    finally:
        proxy.close()
