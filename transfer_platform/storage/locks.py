"""A model's lock: one transfer (or delete sweep, or staging read) of a model at a time, however it
was started (two CLI processes, ``materialize()`` outside the run queue).

The algorithm is written once (:func:`hold`): take the lock if it is free; else take it over if
its holder is gone (its process dead, its lease run out); else ask again until ``wait_seconds``
have passed, then refuse naming the holder (:func:`running`). What differs per store is a small
backend (:class:`Lock`), a compare-and-set of the store's own: a file's ``flock`` (:class:`FileLock`),
PostgreSQL's session advisory lock (:class:`AdvisoryLock`, the PostgreSQL destination's and
Iceberg's catalog's), MySQL's ``GET_LOCK`` (:class:`NamedLock`), and beside their stores an object
written only if absent (S3, Azure), a generation precondition (GCS), a file created exclusively
(SFTP), a lock row (Snowflake, BigQuery), a lock table (ClickHouse); where nothing ends with the
holder's process, a lease renewed at each commit (:class:`LeaseLock`: the holder's record and the
take-over rule once, under BigQuery's and ClickHouse's). :class:`Locks` holds one writer's locks.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transfer_platform.errors import TransferRunning, transfer_running

if TYPE_CHECKING:
    import psycopg

#: the refusal's fix ends with this unless the lock says otherwise (:attr:`Lock.then`)
QUEUED = "transfers queued through Dagster wait for each other by themselves"


class Lock:
    """One model's lock in one store, as :func:`hold` uses it: a compare-and-set of the store's."""

    #: seconds between two attempts; ``None``: :meth:`take` waits by itself (a server's lock wait)
    poll_seconds: float | None = 0.2
    #: what the refusal's fix adds after "then run this one again" (``None``: nothing)
    then: str | None = QUEUED

    def take(self, within: float) -> bool:
        """Take the lock if it is free (a lock that waits by itself waits up to ``within``
        seconds); False while another holds it."""
        raise NotImplementedError

    def take_over(self) -> bool:
        """Clear the lock if its holder is gone (or it was released meanwhile): True to try
        again at once. A session's lock or a ``flock`` ends with its holder: never."""
        return False

    def holder(self) -> str:
        """Who holds it, as the refusal names them."""
        raise NotImplementedError

    def renew(self) -> None:
        """Tell that the lock is still held (a window committed); ``TransferRunning`` if it was
        taken over. A session's lock or a ``flock`` lasts as long as its holder: nothing."""

    def release(self) -> None:
        """Let go. A session's lock goes with its connection, which its writer closes."""


def hold(lock: Lock, *, model: str, destination: str, wait_seconds: float) -> None:
    """Take ``lock``, taking over a gone holder's, waiting up to ``wait_seconds`` for a live one;
    then ``TransferRunning`` naming it."""
    deadline = time.monotonic() + max(0.0, wait_seconds)
    while not lock.take(max(0.0, deadline - time.monotonic())):
        if lock.take_over():
            continue
        if lock.poll_seconds is None or time.monotonic() >= deadline:
            raise running(model, destination, lock.holder(), then=lock.then)
        time.sleep(lock.poll_seconds)


class Locks:
    """The model locks one writer holds, by model name, until :meth:`release_all`."""

    def __init__(self) -> None:
        self._held: dict[str, Lock] = {}

    def hold(self, model: str, lock: Lock, *, destination: str, wait_seconds: float) -> None:
        """:func:`hold` ``lock`` unless this writer holds the model's lock already."""
        if model not in self._held:
            hold(lock, model=model, destination=destination, wait_seconds=wait_seconds)
            self._held[model] = lock

    def renew(self, model: str) -> None:
        """Renew the model's lock, if held; one taken over is no longer held."""
        lock = self._held.get(model)
        if lock is not None:
            try:
                lock.renew()
            except TransferRunning:
                del self._held[model]
                raise

    def release_all(self) -> None:
        """Release every lock held (one that cannot be released now expires, or went with its
        session)."""
        for lock in self._held.values():
            with suppress(Exception):
                lock.release()
        self._held.clear()

    def clear(self) -> None:
        """Forget the locks without releasing them (their session is gone, and they with it)."""
        self._held.clear()

    def __getitem__(self, model: str) -> Lock:
        return self._held[model]

    def __contains__(self, model: str) -> bool:
        return model in self._held

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._held))

    def __bool__(self) -> bool:
        return bool(self._held)


def running(model: str, destination: str, who: str, *, then: str | None = QUEUED) -> TransferRunning:
    """The refusal of a transfer whose model's lock another one holds (``who``)."""
    return transfer_running(
        model, destination, f"another transfer of this model to this destination is running ({who}); two "
                            "transfers never write one table at once",
        "wait for it to end, or cancel it (transfer-platform cancel TRANSFER_ID), then run this one again"
        + (f"; {then}" if then else ""))


def holder_text(transfer_id: str) -> str:
    """Who holds a lock, as its file (or object) says."""
    return json.dumps({"transfer_id": transfer_id, "host": socket.gethostname(), "pid": os.getpid(),
                       "since": datetime.now(UTC).isoformat(timespec="seconds")})


def process_gone(host: object, pid: object) -> bool:
    """Whether a lock's holder was a process of this machine that runs no more (killed outright:
    its lock is taken over at once, without waiting for its lease)."""
    if host != socket.gethostname() or not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's: it runs
        return False
    return False


def who_holds(text: str) -> str:
    """A lock's :func:`holder_text`, as a refusal names the holder."""
    try:
        holder = json.loads(text)
        return (f"transfer {holder['transfer_id']}, process {holder['pid']} on {holder['host']}, "
                f"since {holder['since']}")
    except (ValueError, KeyError, TypeError):
        return "a process that has just started"


class LeaseLock(Lock):
    """A lock its holder keeps by renewing a lease, in a store where nothing ends with the holder's
    process (a row, a table): the holder's record (:meth:`record`: transfer, host, process, lease
    end) is written by the store's compare-and-set (:meth:`take`) only where no holder is, renewed
    at each commit; a holder whose process is gone (on this host) or whose lease ended is taken
    over: :meth:`read`, then :meth:`clear` exactly that holder's lock (another taker may be first)."""

    #: a holder not renewed for this long is taken over (a window's commit renews it)
    lease_seconds = 900
    transfer_id = ""  # the holder's, in its record
    held: Any = None  # the holder's record, as last read

    def record(self) -> str:
        """This holder's record, its lease running from now."""
        now = time.time_ns() // 1000
        return json.dumps({"transfer_id": self.transfer_id, "host": socket.gethostname(), "pid": os.getpid(),
                           "since_us": now, "lease_end_us": now + self.lease_seconds * 1_000_000})

    def read(self) -> Any:
        """The holder's record (``{}``: unreadable); None if there is none."""
        raise NotImplementedError

    def clear(self, held: Any) -> None:
        """Remove the lock of ``held``, a gone holder, only while it still is theirs."""
        raise NotImplementedError

    def gone(self, held: Any) -> bool:
        """Whether ``held``'s holder is gone: its lease ran out, or its process (on this host)."""
        return held.get("lease_end_us", 0) < time.time_ns() // 1000 or process_gone(held.get("host"), held.get("pid"))

    def take_over(self) -> bool:
        self.held = held = self.read()
        if not held or not self.gone(held):
            return False
        self.clear(held)
        return True

    def holder(self) -> str:
        held = self.held
        return ("another session" if not held else
                f"transfer {held.get('transfer_id')!r} on {held.get('host')}, process {held.get('pid')}")


class FileLock(Lock):
    """An exclusive ``flock`` on ``<folder>/<model>.lock``, the operating system's: released when
    the writer closes the file, or when its process dies (never stale). The file says who holds it."""

    poll_seconds = 0.1

    def __init__(self, folder: Path, model: str, transfer_id: str) -> None:
        self.path, self.transfer_id = Path(folder) / f"{model}.lock", transfer_id
        self._descriptor: int | None = None

    def take(self, within: float) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            return False
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, holder_text(self.transfer_id).encode(), 0)
        self._descriptor = descriptor
        return True

    def holder(self) -> str:
        try:
            return who_holds(self.path.read_bytes()[:4096].decode(errors="replace"))
        except OSError:
            return who_holds("")

    def release(self) -> None:
        if self._descriptor is not None:
            with suppress(OSError):
                os.close(self._descriptor)  # closing the file releases its flock
            self._descriptor = None


def advisory_key(*names: str) -> int:
    """A PostgreSQL advisory lock key (a signed 64-bit integer) for what ``names`` name."""
    digest = hashlib.sha256("\x00".join(("transfer_platform", *names)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def lock_timeout(seconds: float) -> str:
    """``seconds`` (``Tuning.lock_wait_seconds``) as the transaction's lock timeout; never 0,
    which PostgreSQL reads as no timeout at all."""
    return f"SET LOCAL lock_timeout = '{max(1, round(seconds * 1000))}ms'"


#: the session holding an advisory lock (parameters: the key's high and low 32 bits)
ADVISORY_LOCK_HOLDER = (
    "SELECT a.application_name, a.backend_start FROM pg_locks l JOIN pg_stat_activity a "
    "USING (pid) WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.classid = %s AND l.objid = %s LIMIT 1")


class AdvisoryLock(Lock):
    """A PostgreSQL session advisory lock ``key`` on ``conn`` (psycopg), whose session names the
    transfer: released when the connection closes or its process dies (never stale); the server
    waits for it (``lock_timeout``: a killed transfer's session ends a moment after its process)."""

    poll_seconds = None

    def __init__(self, conn: psycopg.Connection, key: int, transfer_id: str) -> None:
        self.conn, self.key, self.transfer_id = conn, key, transfer_id

    def take(self, within: float) -> bool:
        import psycopg

        self.conn.execute("SELECT set_config('application_name', %s, false)",
                          (f"transfer_platform {self.transfer_id}"[:63],))
        try:
            with self.conn.transaction():
                self.conn.execute(lock_timeout(within))
                self.conn.execute("SELECT pg_advisory_lock(%s)", (self.key,))
        except psycopg.errors.LockNotAvailable:
            return False
        return True

    def session(self) -> tuple | None:
        """The holding session's ``application_name`` and start, if it still runs."""
        return self.conn.execute(ADVISORY_LOCK_HOLDER,
                                 ((self.key >> 32) & 0xFFFFFFFF, self.key & 0xFFFFFFFF)).fetchone()

    def holder(self) -> str:
        held = self.session()
        return (f"{held[0] or 'a session'}, connected since {held[1]:%Y-%m-%d %H:%M:%S}" if held
                else "a session that has just ended")


class NamedLock(Lock):
    """MySQL's ``GET_LOCK(name)`` on ``session`` (a MySQL destination's): the session's, released
    when its connection closes or its process dies (never stale); the server waits for it."""

    poll_seconds = None

    def __init__(self, session: Any, name: str) -> None:
        self.session, self.name = session, name

    def take(self, within: float) -> bool:
        return self.session.one(("SELECT GET_LOCK(%s, %s)", (self.name, within)))[0] == 1

    def holder(self) -> str:
        held = self.session.one(("SELECT USER, HOST, TIME FROM information_schema.PROCESSLIST WHERE ID = IS_USED_LOCK(%s)",
                                 (self.name,)))
        return f"session of {held[0]}@{held[1]}, running for {held[2]} s" if held else "another session"
