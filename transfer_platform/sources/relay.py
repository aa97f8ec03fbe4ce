"""A large window relayed from a PostgreSQL source into a PostgreSQL destination's staging
table in PostgreSQL's binary COPY format, never decoded on the way.

A window moved alone (more than ``Tuning.run_rows`` rows) is otherwise read by Spark's JDBC
reader, its rows decoded in the JVM, handed to Python workers as Arrow and written as CSV into
``COPY ... FROM STDIN``: every value is converted three times. When nothing Spark does to the rows
would change them, the window is *relayed* instead: a Spark job
(``spark.range(n, numPartitions=n).mapInArrow``, so that it runs alike on a local Spark, a Spark
Connect server and a cluster) whose tasks each take one slice of the window and, in the worker,
stream ``COPY (SELECT src::type AS dest, ... FROM <the window's query> WHERE <slice>) TO STDOUT
(FORMAT binary)`` on the source, chunk by chunk, into ``COPY <staging> FROM STDIN (FORMAT binary)``
on the destination. It is taken when:

- the source offers the relay (``Route.COPY_RELAY``: a PostgreSQL source) and the destination
  accepts a COPY stream (``Rows.COPY_STREAM``: a PostgreSQL destination's ``write_relayed``);
- the model's columns are read as they are (the proof of :mod:`~transfer_platform.sources.direct`:
  no cast, no rounding, no text last-modified column);
- the source holds each key once (a unique index on the key: no version of a key to choose);
- ``Tuning.relay_windows`` is on (the default).

The window's query is the one Spark would run (tenant, bounds, NULL last-modified values), in a
READ ONLY transaction in UTC with the same search path; slices split it on the last-modified
column between the window's bounds as Spark's JDBC partitions do (the first slice also takes
NULL values, so the staging scan still refuses them by name). Each value is cast on the source to
the staging column's own type, so the binary rows fit the destination as they are. Each slice
commits on its own; a task Spark retries first deletes its slices' rows an earlier attempt
committed (:func:`relay_partition`). What follows the
stage (the scan, the key, the merge or swap, the watermark) is the writer's as for any window.

A small window read alone in its step (an incremental's) is streamed the same way, in one slice,
by the transfer's own process (``DirectReads.copy_out`` into ``PostgresWriter.write_streamed``):
no Spark job, the source connection the model's direct reads hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from dataclasses import dataclass
from datetime import datetime
from select import POLLIN, POLLOUT, poll
from typing import TYPE_CHECKING

from transfer_platform.core.sql import change_literal, derived_table, quote_ident, search_path_value
from transfer_platform.errors import first_line
from transfer_platform.runtime.connections import postgres_connect_kwargs
from transfer_platform.runtime.read_timeouts import SourceStalled, shut_down
from transfer_platform.sources.base import ReadRequest

if TYPE_CHECKING:
    import psycopg

    from transfer_platform.sources.jdbc import JdbcReader

#: bytes gathered from the source's COPY messages (one a row) before one write to the destination
CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class RelayRead:
    """One window's relay: what a Spark task needs to stream its slice (plain values: it is
    pickled into the workers). ``columns``: (name in the source, name in the destination)."""

    source: dict  # psycopg.connect arguments of the source (the password resolved)
    search_path: str | None
    window_sql: str  # the window's query, as Spark would send it
    columns: tuple[tuple[str, str], ...]
    last_modified: str  # its name in the window's query
    bounds: tuple[str, ...]  # the slices' inner bounds, as SQL literals (n - 1 of them)
    read_timeout: int  # the source's read_timeout_seconds: the longest wait for its next bytes

    @property
    def slices(self) -> int:
        return len(self.bounds) + 1

    def predicate(self, index: int, last_modified: str) -> str:
        """Slice ``index``'s condition on the last-modified column named ``last_modified`` ("" for
        the one slice of a window not split)."""
        lm = quote_ident(last_modified)
        where = []
        if index > 0:
            where.append(f"{lm} >= {self.bounds[index - 1]}")
        if index < len(self.bounds):
            where.append(f"{lm} < {self.bounds[index]}")
        predicate = " AND ".join(where)
        if index == 0 and predicate:  # the first slice also takes NULL values (refused by the scan)
            predicate = f"({predicate} OR {lm} IS NULL)"
        return predicate

    def copy_out(self, index: int, types: dict[str, str]) -> str:
        """Slice ``index``'s ``COPY ... TO STDOUT (FORMAT binary)``, each column cast to the
        destination staging column's type (``types``: destination name -> type)."""
        select = ", ".join(f"{quote_ident(src)}::{types[dest]} AS {quote_ident(dest)}" for src, dest in self.columns)
        predicate = self.predicate(index, self.last_modified)
        sql = f"SELECT {select} FROM {derived_table(self.window_sql, alias='tp_relay')}"
        return f"COPY ({sql}{' WHERE ' + predicate if predicate else ''}) TO STDOUT (FORMAT binary)"

    def clear_slice(self, index: int, staging: str) -> str:
        """The ``DELETE`` of slice ``index``'s rows from ``staging`` (a qualified, quoted name),
        by the last-modified column's name there: what an earlier attempt of its task committed."""
        predicate = self.predicate(index, dict(self.columns)[self.last_modified])
        return f"DELETE FROM {staging}{' WHERE ' + predicate if predicate else ''}"


def relay_for(reader: JdbcReader, request: ReadRequest, slices: int, *, here: bool = False) -> RelayRead:
    """The relay of ``request``'s window from ``reader``'s PostgreSQL source in ``slices`` slices;
    ``here``: streamed in this process on a connection the caller holds
    (:meth:`DirectReads.copy_out <transfer_platform.sources.direct.DirectReads.copy_out>`), so
    without the source's connection arguments."""
    from transfer_platform.sources.jdbc import count_statement

    model = request.model
    kind = model.change_column
    lower, upper = kind.bound(request.bounds.lower), kind.bound(request.bounds.upper)
    default_schema = reader.default_schema_for(request)
    count_statement(reader.source.name, "rows")  # one read of the window, as Spark's would be
    return RelayRead(
        source={} if here else postgres_connect_kwargs(reader.source.connection, what=f"sources.{reader.source.name}"),
        search_path=None if default_schema is None else search_path_value(default_schema),
        window_sql=reader.query_for(request),
        columns=tuple((c.name_in_source, c.destination_name) for c in model.columns),
        last_modified=model.last_modified.name_in_source,
        bounds=tuple(change_literal(b) for b in split_bounds(lower, upper, slices)),
        read_timeout=reader.source.read_timeout_seconds,
    )


def split_bounds(lower: object, upper: object, slices: int) -> list[object]:
    """``slices - 1`` values evenly between ``lower`` and ``upper`` (datetimes, dates or
    integers), strictly increasing; fewer if the range cannot hold that many."""
    if slices <= 1:
        return []
    inner: list[object] = []
    for i in range(1, slices):
        if isinstance(lower, datetime):
            value: object = lower + (upper - lower) * i / slices  # type: ignore[operator]
        else:  # a date or an integer: whole steps
            value = lower + (upper - lower) * i // slices  # type: ignore[operator]
        if lower < value < upper and (not inner or inner[-1] < value):  # type: ignore[operator]
            inner.append(value)
    return inner


def task_attempt() -> int:
    """This Spark task's attempt number (0 the first time; 0 outside a Spark task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return 0 if context is None else context.attemptNumber()


def relay_partition(relay: RelayRead, destination: dict, staging: str, copy_in: str, types: dict[str, str],
                    batches: Iterator, *, attempt: Callable[[], int] = task_attempt) -> Iterator:
    """Runs in a Spark Python worker: for each slice index in ``batches`` (a ``spark.range``),
    the slice streamed from the source into ``copy_in`` on the destination (its ``staging``
    table), in its own transaction; yields the rows written. A retried task (Spark's attempt
    number above 0) first deletes, in each slice's transaction, the rows an earlier attempt
    committed, so a slice is never staged twice (which the key check would refuse as a
    duplicate key the source does not hold)."""
    import pyarrow as pa

    retried = attempt() > 0
    rows = 0
    for batch in batches:
        for index in batch.column(0).to_pylist():
            rows += relay_slice(relay, int(index), destination, copy_in, types,
                                clear=relay.clear_slice(int(index), staging) if retried else None)
    yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))


def copied_out(conn: psycopg.Connection, statement: str, read_timeout: float) -> Iterator[bytearray]:
    """The data of ``statement`` (a ``COPY ... TO STDOUT``) run on ``conn`` in its open transaction,
    gathered into chunks of ``CHUNK_BYTES`` or more (the last one smaller): one write each into the
    destination's COPY. Read message by message (one a row) with libpq's ``PQgetCopyData``
    through psycopg's libpq wrapper (``psycopg.pq``), waiting only when libpq holds no message
    (:func:`_wait`): psycopg's ``Copy`` hands each message through its generators and waits, which
    cost a relay's worker ~2.5x the CPU of the read itself. A refusal of the statement is raised as
    psycopg's error of its SQLSTATE, after the last chunk is known to be whole; a generator closed
    early cancels the COPY (:func:`_abandon`). A wait longer than ``read_timeout`` seconds for
    the source's next bytes raises :class:`~transfer_platform.runtime.read_timeouts.SourceStalled`
    and ends the connection (``transfer_platform/runtime/read_timeouts.py``)."""
    from psycopg import pq

    pgconn = conn.pgconn
    pgconn.send_query(statement.encode(conn.info.encoding))
    while pgconn.flush():  # psycopg's connections are nonblocking: until the statement is sent
        if _ready(pgconn, POLLIN | POLLOUT, read_timeout) & POLLIN:  # as libpq asks: what came meanwhile read
            pgconn.consume_input()
    result = _result(pgconn, read_timeout)
    if result is None or result.status != pq.ExecStatus.COPY_OUT:
        raise _refusal(pgconn, result, conn.info.encoding, read_timeout)
    finished = False
    try:
        pending = bytearray()
        while True:
            size, data = pgconn.get_copy_data(1)  # a message already read; 0: none yet, -1: the end
            if size == 0:
                _wait(pgconn, read_timeout)
                continue
            if size < 0:
                break
            pending += data
            if len(pending) >= CHUNK_BYTES:
                yield pending
                pending = bytearray()
        result = _result(pgconn, read_timeout)
        finished = True
        if result is None or result.status != pq.ExecStatus.COMMAND_OK:
            raise _refusal(pgconn, result, conn.info.encoding, read_timeout)
        while _result(pgconn, read_timeout) is not None:  # the statement's end, as libpq wants it read
            pass
    except SourceStalled:
        finished = True  # the connection is ended: nothing to cancel
        raise
    finally:
        if not finished and pgconn.status == pq.ConnStatus.OK:  # closed early: the COPY cancelled
            _abandon(conn, read_timeout)
    if pending:
        yield pending


def _wait(pgconn: psycopg.pq.abc.PGconn, timeout: float) -> None:
    """Until the server sent more, then read it into libpq's buffer (:func:`_ready`)."""
    _ready(pgconn, POLLIN, timeout)
    pgconn.consume_input()


def _ready(pgconn: psycopg.pq.abc.PGconn, events: int, timeout: float) -> int:
    """The ``events`` (``POLLIN``, ``POLLOUT``) that the connection's socket is ready for, waited
    for in Python's ``poll``, which lets the process's other threads run: psycopg's libpq wrapper
    holds the GIL in libpq's calls, so none of them may block. ``poll``, not ``select``: ``select``
    refuses a descriptor above FD_SETSIZE (1024), which a process holding many files or
    connections (a code server, a test session) gives a new connection. Nothing after
    ``timeout`` seconds: the connection is ended and :class:`SourceStalled` raised."""
    waiting = poll()
    waiting.register(pgconn.socket, events)
    found = waiting.poll(timeout * 1000)
    if not found:
        shut_down(pgconn.socket)
        raise SourceStalled(timeout)
    return found[0][1]


def _result(pgconn: psycopg.pq.abc.PGconn, timeout: float) -> psycopg.pq.abc.PGresult | None:
    """libpq's next result, waited for without blocking in libpq (:func:`_wait`)."""
    while pgconn.is_busy():
        _wait(pgconn, timeout)
    return pgconn.get_result()


def _abandon(conn: psycopg.Connection, timeout: float) -> None:
    """The COPY in progress on ``conn`` cancelled and its messages read to their end: the
    connection is left usable (its transaction failed, for its owner to roll back)."""
    with suppress(Exception):
        conn.cancel_safe()
        pgconn = conn.pgconn
        while (size := pgconn.get_copy_data(1)[0]) >= 0:
            if size == 0:
                _wait(pgconn, timeout)
        while _result(pgconn, timeout) is not None:
            pass


def _refusal(pgconn: psycopg.pq.abc.PGconn, result: psycopg.pq.abc.PGresult | None, encoding: str,
             timeout: float) -> psycopg.Error:
    """psycopg's error for a refused COPY: of the result's SQLSTATE, with its message."""
    import psycopg
    from psycopg import pq

    while _result(pgconn, timeout) is not None:  # the connection's results read to their end
        pass
    if result is None or not result.error_message:
        return psycopg.OperationalError(pgconn.get_error_message(encoding) or "the COPY ended without a result")
    sqlstate = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
    message = (result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or result.error_message).decode(encoding, "replace")
    try:
        kind = psycopg.errors.lookup(sqlstate)
    except KeyError:
        kind = psycopg.DatabaseError
    return kind(message)


def relay_slice(relay: RelayRead, index: int, destination: dict, copy_in: str, types: dict[str, str],
                clear: str | None = None) -> int:
    """One slice, source to destination, bytes as they come (gathered to ``CHUNK_BYTES``);
    ``clear`` (a retried task's): run first, in the slice's transaction on the destination."""
    import psycopg

    try:
        with psycopg.connect(**relay.source) as source, psycopg.connect(**destination) as target:
            source.execute("SET TRANSACTION READ ONLY")
            if relay.search_path is not None:
                source.execute("SELECT set_config('search_path', %s, true)", (relay.search_path,))
            cursor = target.cursor()
            if clear is not None:
                cursor.execute(clear)
            with cursor.copy(copy_in) as into, closing(copied_out(source, relay.copy_out(index, types), relay.read_timeout)) as chunks:
                for chunk in chunks:
                    into.write(chunk)
            source.rollback()
            return max(cursor.rowcount, 0)
    except psycopg.Error as exc:
        # the first line only: a clear reason, never the connection settings
        raise RuntimeError(f"relaying the window into the staging table failed: "
                           f"{first_line(exc)}") from None
