"""A source that stops sending ends the read after its ``read_timeout_seconds``.

A database that stops answering in the middle of a read (a hung server, a lost route, a proxy
that holds the connection open) would otherwise hold the transfer for ever: the connection is
open, nothing arrives, and the run keeps its heartbeat, so it stays RUNNING until someone
cancels it. Every read of a database source therefore waits at most the source's
``read_timeout_seconds`` for its next bytes:

- Spark's JDBC reads: the driver's ``socketTimeout`` (PostgreSQL's in seconds, MariaDB's in
  milliseconds), which closes the connection when a read waits longer;
- the binary COPY streams (:mod:`~transfer_platform.sources.relay`, in Spark's tasks and in the
  transfer's process): each wait for the next message is a ``poll`` of at most that long;
- psycopg's other calls on a source (the direct reads' queries, the diagnosis of a failed
  read): :class:`ReadDeadline`, which shuts the connection's socket down if the call has not
  returned by then (libpq has no read timeout of its own); the blocked call then fails at once;
- PyMySQL's connections: its own ``read_timeout``.

Any of them ends the transfer with :func:`stalled`, a ``ConnectionFailure`` naming the source,
its address, the timeout and the fix; the windows committed before stay, the one being read is
not committed, and the next transfer reads it again. A read that legitimately waits longer
before its first row (a slow query on a large table) needs a larger ``read_timeout_seconds``.
"""

from __future__ import annotations

import os
import socket
import threading
from types import TracebackType
from typing import TYPE_CHECKING

from transfer_platform.errors import ConnectionFailure

if TYPE_CHECKING:
    import psycopg

    from transfer_platform.config.connection_settings import DatabaseConnection

#: in the message of a stalled read, wherever it is raised (a Spark task's error crosses into
#: this process as text): :func:`is_stall` finds it there
STALL_MARKER = "sent nothing for"

#: what the JDBC drivers say when their ``socketTimeout`` ends a read (a connection that cannot
#: be made at all says "connect timed out": not a stall)
_JDBC_TIMEOUTS = ("Read timed out",)


class SourceStalled(Exception):
    """A read of a source waited longer than its read timeout for the next bytes."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the source {STALL_MARKER} {seconds:g} s while a read waited for it")


def is_stall(exc: BaseException | str) -> bool:
    """Whether an error (or its text) is a read that waited longer than its timeout."""
    text = exc if isinstance(exc, str) else str(exc)
    return STALL_MARKER in text or any(marker in text for marker in _JDBC_TIMEOUTS)


def stalled(what: str, connection: DatabaseConnection, seconds: int) -> ConnectionFailure:
    """The error of a read of the source ``what`` that waited past its timeout of ``seconds``:
    the provider's (its database stopped answering)."""
    failure = ConnectionFailure(
        what, host=connection.host, port=connection.port,
        reason=f"it {STALL_MARKER} {seconds} s while a read waited for rows (read_timeout_seconds); "
               "the window being read is not committed",
        fix="check that the database answers (a lock held on the table, an overloaded server, a lost "
            "network route); a read that legitimately waits longer for its first row needs a larger "
            "read_timeout_seconds on the source",
    )
    failure.blame = "provider"
    return failure


class ReadDeadline:
    """Around a blocking psycopg call on ``conn``: if it has not returned after ``seconds``, the
    connection's socket is shut down, so that the call fails at once; :attr:`fired` then says
    so (the caller raises :class:`SourceStalled`). The connection is unusable afterwards."""

    def __init__(self, conn: psycopg.Connection, seconds: float) -> None:
        self.seconds = seconds
        self.fired = False
        self._fd = conn.pgconn.socket
        self._lock = threading.Lock()
        self._done = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def __enter__(self) -> ReadDeadline:
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._timer.cancel()
        with self._lock:  # the socket is never shut down once the call returned
            self._done = True
        # fired: the connection is ended, even if the call returned just as the timer fired
        if self.fired and not isinstance(exc, SourceStalled):
            raise SourceStalled(self.seconds) from exc

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            shut_down(self._fd)


def shut_down(fd: int) -> None:
    """The connection on socket ``fd`` ended both ways: every call on it, blocked or to come,
    fails at once (closing a connection whose server stopped answering would wait on it)."""
    try:  # a duplicate of the descriptor: shutting it down ends the connection itself
        with socket.socket(fileno=os.dup(fd)) as held:
            held.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
