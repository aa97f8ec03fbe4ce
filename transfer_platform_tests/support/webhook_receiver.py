"""A real HTTP receiver for webhook tests: a ``http.server`` on 127.0.0.1 in a thread that records
every request (method, path, headers, raw body) and can be switched down (its port closed:
connection refused), up again on the same port, made to answer an error status, to answer
slowly, or to hang."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.status = 200
        self.delay = 0.0  # seconds each answer takes (a slow receiver)
        self._release = threading.Event()  # set: a hanging receiver answers
        self._release.set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                content = self.rfile.read(length)
                with receiver._lock:
                    receiver.requests.append(Received("POST", self.path, dict(self.headers.items()), content))
                receiver._release.wait(30)
                if receiver.delay:
                    time.sleep(receiver.delay)  # the receiver's own pace, not a wait of the test
                answer = f"status {receiver.status}".encode()
                self.send_response(receiver.status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook-receiver", daemon=True)
        self._thread.start()

    def down(self) -> None:
        """Close the port: a POST is refused."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    def answer(self, status: int) -> None:
        self.status = status

    def hang(self) -> None:
        """Accept requests and never answer (until :meth:`release`)."""
        self._release.clear()

    def release(self) -> None:
        self._release.set()

    def wait_for(self, count: int, timeout: float = 10) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.02)
        raise AssertionError(f"the receiver got {len(self.requests)} request(s), expected {count}")


@contextmanager
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    running.up()
    try:
        yield running
    finally:
        running.release()
        running.down()
