"""A relay's read of the source's ``COPY ... TO STDOUT`` (``relay.copied_out``), against the
machine's PostgreSQL: the bytes psycopg's own ``Copy`` reads, in chunks; a refusal raised as
psycopg's error of its SQLSTATE; a read abandoned halfway leaves the connection usable; while it
waits for the server, the process's other threads run (a run's heartbeat, a proxy)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from transfer_platform.runtime.read_timeouts import ReadDeadline, SourceStalled
from transfer_platform.sources import relay
from transfer_platform.sources.relay import copied_out
from transfer_platform_tests.support.postgres import pg_connect

ROWS = 20_000
#: every row's text, ~70 bytes a row in binary COPY: several chunks of the patched size below
COPY = (f"COPY (SELECT g AS id, md5(g::text) AS v, timestamptz '2025-01-01 00:00Z' + g * interval '1 s' AS at FROM generate_series(1, {ROWS}) g) "
        "TO STDOUT (FORMAT binary)")


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(relay, "CHUNK_BYTES", 256 * 1024)
    return relay.CHUNK_BYTES


def psycopg_copy(conn: psycopg.Connection, statement: str) -> bytes:
    with conn.cursor().copy(statement) as out:
        return b"".join(bytes(message) for message in out)


def test_it_reads_the_bytes_psycopg_reads_in_chunks_of_the_chunk_size(small_chunks: int) -> None:
    with pg_connect() as conn:
        conn.execute("SET TRANSACTION READ ONLY")
        chunks = list(copied_out(conn, COPY, 60))
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # its transaction
        conn.rollback()
        expected = psycopg_copy(conn, COPY)
    assert b"".join(chunks) == expected
    assert len(chunks) > 2
    assert all(len(c) >= small_chunks for c in chunks[:-1])
    assert len(chunks[-1]) > 0


def test_a_refusal_halfway_is_psycopgs_error_and_the_connection_stays_usable(small_chunks: int) -> None:
    # a division by zero at row 15,000: rows were sent before the server refused
    failing = COPY.replace("md5(g::text) AS v", f"md5((1 / ({ROWS - 5000} - g))::text) AS v")
    with pg_connect() as conn:
        chunks = []
        with pytest.raises(psycopg.errors.DivisionByZero, match="division by zero"):
            chunks.extend(copied_out(conn, failing, 60))
        assert chunks  # some chunks came before the refusal
        conn.rollback()
        assert conn.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(psycopg.errors.UndefinedTable, match="no_such_table"):
            list(copied_out(conn, "COPY no_such_table TO STDOUT (FORMAT binary)", 60))
        conn.rollback()
        assert conn.execute("SELECT 2").fetchone() == (2,)


def test_a_read_abandoned_halfway_cancels_the_copy_and_leaves_the_connection_usable(small_chunks: int) -> None:
    with pg_connect() as conn:
        chunks = copied_out(conn, COPY, 60)
        first = next(chunks)
        assert len(first) >= small_chunks
        chunks.close()  # the destination failed: the relay stops reading
        conn.rollback()
        assert conn.execute("SELECT 3").fetchone() == (3,)


SLOW = {
    "before the first row": COPY.replace("FROM generate_series", "FROM pg_sleep(1), generate_series"),
    # a second's wait after 10,000 rows: while the COPY's rows come
    "halfway": COPY.replace("md5(g::text) AS v", "md5(g::text) || pg_sleep(CASE WHEN g = 10000 THEN 1 ELSE 0 END) AS v"),
}


@pytest.mark.parametrize("when", sorted(SLOW))
def test_while_it_waits_for_the_server_the_other_threads_run(when: str) -> None:
    """psycopg's libpq wrapper holds the GIL in libpq's calls: a read blocking in libpq would stop
    every thread of the process (a run's heartbeat) until the source answers."""
    ticks, stop = [], threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            stop.wait(0.01)

    slow = SLOW[when]
    thread = threading.Thread(target=tick)
    with pg_connect() as conn:
        thread.start()
        try:
            started = time.monotonic()
            chunks = list(copied_out(conn, slow, 60))
            ended = time.monotonic()
        finally:
            stop.set()
            thread.join()
    assert b"".join(chunks).startswith(b"PGCOPY")
    during = [t for t in ticks if started < t < ended]
    assert ended - started >= 1.0
    assert len(during) >= 10, f"the other thread ran {len(during)} times in {ended - started:.1f} s"


def test_it_reads_from_a_connection_whose_descriptor_is_above_fd_setsize() -> None:
    """A code server or a run holding many files gives a new connection a descriptor above 1024,
    which ``select`` refuses (its FD_SETSIZE): the read waits all the same."""
    import os
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        pytest.skip(f"the process may hold only {soft} descriptors")
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        with pg_connect() as conn:
            assert conn.pgconn.socket > 1024
            chunks = list(copied_out(conn, SLOW["halfway"], 60))  # it waits for the server halfway
            conn.rollback()
            expected = psycopg_copy(conn, SLOW["halfway"])
    finally:
        for fd in held:
            os.close(fd)
    assert b"".join(chunks) == expected


#: the server silent for 10 s, before the first row or halfway: far past the 0.3 s timeouts below,
#: so that ending well before it proves nothing waited for the server, however busy the machine
SILENT = {when: statement.replace("pg_sleep(1)", "pg_sleep(10)").replace("THEN 1 ELSE", "THEN 10 ELSE")
          for when, statement in SLOW.items()}


@pytest.mark.parametrize("when", list(SILENT))
def test_a_wait_longer_than_the_read_timeout_ends_the_read_and_the_connection(when: str) -> None:
    """The server sends nothing for 10 s, the read timeout is 0.3 s: the read ends after that
    timeout with ``SourceStalled`` (the source's ``read_timeout_seconds``), and the connection is
    ended: what is sent on it next fails at once, and closing it does not wait."""
    conn = pg_connect()
    try:
        conn.execute("SET TRANSACTION READ ONLY")
        started = time.monotonic()
        with pytest.raises(SourceStalled, match="sent nothing for 0.3 s"):
            list(copied_out(conn, SILENT[when], 0.3))
        stalled_in = time.monotonic() - started
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    finally:
        conn.close()
    assert 0.3 <= stalled_in < 5, stalled_in
    assert time.monotonic() - started < 5  # the server's 10 s of silence were not waited for


def test_a_deadline_ends_a_call_that_outlives_it_and_not_one_that_returns() -> None:
    """``ReadDeadline`` around psycopg's own calls (libpq has no read timeout): a query that
    returns in time leaves the connection as it was; one the server answers only after 10 s ends
    after the deadline (0.3 s) with ``SourceStalled``, long before the server's answer."""
    with pg_connect() as conn:
        with ReadDeadline(conn, 0.3):
            assert conn.execute("SELECT 1").fetchone() == (1,)
        time.sleep(0.5)  # past the deadline: the finished call's timer must not fire
        assert conn.execute("SELECT 2").fetchone() == (2,)
        started = time.monotonic()
        with pytest.raises(SourceStalled), ReadDeadline(conn, 0.3):
            conn.execute("SELECT pg_sleep(10)")
        stalled_in = time.monotonic() - started
        conn.close()
    assert 0.3 <= stalled_in < 5, stalled_in
