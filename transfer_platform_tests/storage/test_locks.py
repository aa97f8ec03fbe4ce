"""A model's lock: the one algorithm (:func:`~transfer_platform.storage.locks.hold`) and the
contract every backend keeps with it, run against the backends that run here (a file's
``flock``, PostgreSQL's advisory lock, MySQL's ``GET_LOCK``, an S3 object on moto's server),
each holder with a connection of its own as two processes would have:

- a second holder waits ``wait_seconds``, then is refused naming the first;
- once the first lets go (its writer closes), the second takes the lock at once;
- a writer asks for a model's lock it holds already without waiting for itself.

The algorithm's own cases (a gone holder taken over at once, a lock that waits by itself asked
once, the refusal's wording per store) run over a compare-and-set in memory.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from transfer_platform.config.connection_settings import S3Connection
from transfer_platform.destinations.mysql.writer import NamedLock
from transfer_platform.destinations.sql.session import PymysqlSession
from transfer_platform.errors import TransferRunning
from transfer_platform.storage.locks import (
    QUEUED,
    AdvisoryLock,
    FileLock,
    LeaseLock,
    Lock,
    Locks,
    advisory_key,
    hold,
)
from transfer_platform.storage.s3 import ObjectLock, S3Store
from transfer_platform_tests.support.mysql import mysql_connect
from transfer_platform_tests.support.postgres import PG, pg_connect

MODEL = "orders"
RUNNING = "another transfer of this model to this destination is running"


@dataclass
class Place:
    """Where a model's lock lives: ``lock(holder, transfer_id)`` makes the lock as holder 0 or 1
    (each with a session of its own) asks for it; ``end(holder)`` closes that holder's writer."""

    lock: Callable[[int, str], Lock]
    end: Callable[[int], None]
    names: str  # how a refusal names holder 0 (its transfer "first")


@pytest.fixture(params=["file", "postgres", "mysql", "s3"])
def place(request, tmp_path, monkeypatch) -> Iterator[Place]:
    made: dict[int, Lock] = {}

    def keep(holder: int, lock: Lock) -> Lock:
        made[holder] = lock
        return lock

    if request.param == "file":
        yield Place(lambda h, t: keep(h, FileLock(tmp_path, MODEL, t)), lambda h: made[h].release(),
                    "transfer first, process")
    elif request.param == "postgres":
        conns = [pg_connect(autocommit=True) for _ in range(2)]
        key = advisory_key(PG["dbname"], uuid.uuid4().hex, MODEL)
        try:
            yield Place(lambda h, t: AdvisoryLock(conns[h], key, t), lambda h: conns[h].close(),
                        "transfer_platform first, connected since")
        finally:
            for conn in conns:
                conn.close()
    elif request.param == "mysql":
        conns = [mysql_connect() for _ in range(2)]
        name = f"tp_test_{uuid.uuid4().hex[:20]}"
        try:
            yield Place(lambda h, t: NamedLock(PymysqlSession(conns[h]), name), lambda h: conns[h].close(),
                        "session of root@")
        finally:
            for conn in conns:
                if conn.open:
                    conn.close()
    else:
        server = request.getfixturevalue("s3")
        bucket = f"locks-{uuid.uuid4().hex[:12]}"
        server.create_bucket(bucket)
        monkeypatch.setenv("TP_TEST_LOCK_KEY", server.access_key)
        monkeypatch.setenv("TP_TEST_LOCK_SECRET", server.secret_key)
        connection = S3Connection(bucket=bucket, endpoint_url=server.endpoint, path_style=True,
                                  access_key_id="${TP_TEST_LOCK_KEY}", secret_access_key="${TP_TEST_LOCK_SECRET}")
        stores = [S3Store(connection, "destination 'test'") for _ in range(2)]
        key = f"books/{MODEL}/lock.json"
        yield Place(lambda h, t: keep(h, ObjectLock(stores[h], key, t)), lambda h: made[h].release(),
                    "transfer first, process")


def test_a_second_holder_waits_then_is_refused_naming_the_first(place: Place) -> None:
    hold(place.lock(0, "first"), model=MODEL, destination="dst", wait_seconds=0)
    started = time.monotonic()
    with pytest.raises(TransferRunning, match=RUNNING) as refused:
        hold(place.lock(1, "second"), model=MODEL, destination="dst", wait_seconds=0.6)
    assert 0.55 <= time.monotonic() - started < 5
    assert str(refused.value).startswith(f"model '{MODEL}' -> destination 'dst': {RUNNING} (")
    assert place.names in str(refused.value)
    assert str(refused.value).endswith(f"then run this one again; {QUEUED}")


def test_once_the_first_lets_go_the_second_takes_the_lock_at_once(place: Place) -> None:
    hold(place.lock(0, "first"), model=MODEL, destination="dst", wait_seconds=0)
    place.end(0)
    started = time.monotonic()
    hold(place.lock(1, "second"), model=MODEL, destination="dst", wait_seconds=5)
    assert time.monotonic() - started < 1


def test_a_writer_asks_for_a_lock_it_holds_without_waiting_for_itself(place: Place) -> None:
    locks = Locks()
    locks.hold(MODEL, place.lock(0, "first"), destination="dst", wait_seconds=0)
    locks.hold(MODEL, place.lock(0, "first"), destination="dst", wait_seconds=0)  # not asked again
    assert MODEL in locks
    assert list(locks) == [MODEL]
    with pytest.raises(TransferRunning, match=RUNNING):
        hold(place.lock(1, "second"), model=MODEL, destination="dst", wait_seconds=0)


# -- the algorithm's own cases, over a compare-and-set in memory -------------------------------


@dataclass
class Cell:
    """One lock's value: who holds it, and whether that holder is gone."""

    holder: str | None = None
    gone: bool = False
    asked: list[float] = field(default_factory=list)  # the `within` of each take


@dataclass
class MemoryLock:
    cell: Cell
    me: str
    poll_seconds: float | None = 0.05
    then: str | None = QUEUED

    def take(self, within: float) -> bool:
        self.cell.asked.append(within)
        if self.cell.holder in (None, self.me):
            self.cell.holder, self.cell.gone = self.me, False
            return True
        return False

    def take_over(self) -> bool:
        if self.cell.gone:
            self.cell.holder = None
            return True
        return False

    def holder(self) -> str:
        return f"held by {self.cell.holder}"

    def renew(self) -> None: ...

    def release(self) -> None:
        self.cell.holder = None


def test_a_gone_holders_lock_is_taken_over_without_waiting() -> None:
    cell = Cell("dead", gone=True)
    started = time.monotonic()
    hold(MemoryLock(cell, "me"), model=MODEL, destination="dst", wait_seconds=10)
    assert cell.holder == "me"
    assert len(cell.asked) == 2
    assert time.monotonic() - started < 0.05


def test_a_lock_that_waits_by_itself_is_asked_once_for_the_whole_wait() -> None:
    cell = Cell("other")
    with pytest.raises(TransferRunning, match=r"\(held by other\)"):
        hold(MemoryLock(cell, "me", poll_seconds=None), model=MODEL, destination="dst", wait_seconds=3)
    assert len(cell.asked) == 1
    assert 2.9 < cell.asked[0] <= 3


def test_a_lock_that_polls_asks_until_the_wait_is_over() -> None:
    cell = Cell("other")
    with pytest.raises(TransferRunning):
        hold(MemoryLock(cell, "me"), model=MODEL, destination="dst", wait_seconds=0.3)
    assert 4 <= len(cell.asked) <= 8
    hold(MemoryLock(Cell(), "me"), model=MODEL, destination="dst", wait_seconds=0)  # free: at once


@pytest.mark.parametrize(("then", "ending"), [
    pytest.param(QUEUED, f"then run this one again; {QUEUED}", id="queued"),
    pytest.param("a transfer that died is taken over once its lease runs out",
                 "then run this one again; a transfer that died is taken over once its lease runs out", id="lease"),
    pytest.param(None, "then run this one again", id="nothing-more"),
])
def test_the_refusal_ends_with_the_stores_own_words(then: str | None, ending: str) -> None:
    with pytest.raises(TransferRunning) as refused:
        hold(MemoryLock(Cell("other"), "me", then=then), model=MODEL, destination="dst", wait_seconds=0)
    assert str(refused.value) == (f"model '{MODEL}' -> destination 'dst': {RUNNING} (held by other); two "
                                  "transfers never write one table at once. Fix: wait for it to end, or cancel it "
                                  f"(transfer-platform cancel TRANSFER_ID), {ending}")


def test_a_lock_taken_over_at_renewal_is_no_longer_held() -> None:
    class Lost(MemoryLock):
        def renew(self) -> None:
            raise TransferRunning("taken over")

    locks = Locks()
    locks.hold(MODEL, Lost(Cell(), "me"), destination="dst", wait_seconds=0)
    with pytest.raises(TransferRunning, match="taken over"):
        locks.renew(MODEL)
    assert MODEL not in locks
    assert not locks


# -- the lease (LeaseLock), over a record in memory ---------------------------------------------


class MemoryLease(LeaseLock):
    """A lease whose store is ``box["record"]``: created only if absent, cleared only if unchanged."""

    poll_seconds = 0.01

    def __init__(self, box: dict, transfer_id: str) -> None:
        self.box, self.transfer_id = box, transfer_id

    def take(self, within: float) -> bool:
        if self.box.get("record") is not None:
            return False
        self.box["record"] = self.record()
        return True

    def read(self) -> dict | None:
        return None if self.box.get("record") is None else json.loads(self.box["record"])

    def clear(self, held: dict) -> None:
        if self.read() == held:
            self.box["record"] = None


def _dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)


@pytest.mark.parametrize(("holder", "taken_over"), [
    pytest.param({"lease_end_us": 2**62, "pid": os.getpid()}, False, id="live"),
    pytest.param({"lease_end_us": 1, "pid": os.getpid()}, True, id="lease-ended"),
    pytest.param({"lease_end_us": 2**62, "pid": "dead"}, True, id="process-gone"),
    pytest.param({"lease_end_us": 2**62, "pid": "dead", "host": "elsewhere"}, False, id="gone-elsewhere-unknown"),
])
def test_a_lease_is_taken_over_when_its_holder_is_gone(holder: dict, taken_over: bool) -> None:
    held = {"transfer_id": "first", "host": socket.gethostname(), **holder}
    held["pid"] = _dead_pid() if held["pid"] == "dead" else held["pid"]
    box = {"record": json.dumps(held)}
    if taken_over:
        hold(MemoryLease(box, "second"), model=MODEL, destination="dst", wait_seconds=5)
        assert json.loads(box["record"])["transfer_id"] == "second"
    else:
        with pytest.raises(TransferRunning, match=f"transfer 'first' on {held['host']}, process {held['pid']}"):
            hold(MemoryLease(box, "second"), model=MODEL, destination="dst", wait_seconds=0.05)
        assert json.loads(box["record"]) == held
