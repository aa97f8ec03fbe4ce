"""Small windows read by the database's own driver, without a Spark job.

Windows read together (at most ``Tuning.run_rows`` rows, :func:`~transfer_platform.transfers.steps.steps`)
come into the transfer's process as Arrow either way; through Spark that costs a job (the JDBC
relation resolved, the query run by an executor, the rows sent back through Spark Connect), about
0.17 s for 16,200 rows on 2 cores, where the same rows through the driver take a few hundredths.
So when nothing Spark does to those rows would change them, the rows are read by the driver:

- a database source that offers the driver's own read (``Route.DRIVER``: its reader's
  ``driver_reads``), whose dialect names the types it reads as they are (``direct_types``:
  PostgreSQL's ``boolean``, ``smallint``/``integer``/``bigint``, ``text``/``varchar``,
  ``double precision``, ``date``, ``timestamptz``), and no other;
- every model column is one of those types in the source, as its ``data_type`` reads it (a
  ``bigint`` read as ``integer``, a ``timestamptz`` as ``timestamp``): no cast, no rounding, no
  time zone to apply; a last-modified column in text (checked against its format by Spark) is not;
- proven before the writer prepares anything, by the read's own query returning no row (its
  columns and their types): this stands for :meth:`~transfer_platform.sources.base.SourceReader.check_read`,
  which would find the same columns castable;
- the query is the one Spark would run (each window's query, tagged with its window, in one
  ``UNION ALL``), in a READ ONLY transaction in UTC, with the same search path;
- the proof, the windows' row counts and their reads share one connection to the source, held
  for the model's transfer (:meth:`DirectReads.close`): a connection costs the database a new
  backend (31-80 ms on 2 cores at load ~30), a query on an open one a round trip.

A window read alone in its step into a destination that accepts a COPY stream (``Rows.COPY_STREAM``),
from a source table holding each key once, is not read into Arrow at all: :meth:`DirectReads.copy_out`
streams it in binary COPY format on the same connection, for the writer's ``write_streamed`` (the
in-process form of :mod:`~transfer_platform.sources.relay`, :meth:`DirectReads.relay`;
``Tuning.relay_windows`` too must be on).

Anything else (a type that is cast, a numeric, json, a lake, a staged batch, a window larger than
``run_rows``) goes through Spark as before. A direct read that fails for any reason is read again
through Spark, which then names the failure as it always does, but for a source that stopped
answering (a call that waited past the source's ``read_timeout_seconds``:
``transfer_platform/runtime/read_timeouts.py``): Spark would wait as long, so the transfer fails
at once. ``Tuning.direct_reads=False`` turns it off.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pyarrow as pa

from transfer_platform.core.sql import derived_table, search_path_value
from transfer_platform.errors import ConnectionFailure, first_line
from transfer_platform.runtime.connections import connect_postgres
from transfer_platform.runtime.read_timeouts import ReadDeadline, SourceStalled
from transfer_platform.sources.base import WINDOW_COLUMN, ReadRequest, StreamFailed

if TYPE_CHECKING:
    import psycopg

    from transfer_platform.sources.jdbc import JdbcReader
    from transfer_platform.sources.relay import RelayRead

_LOG = logging.getLogger(__name__)


class DirectReads:
    """One model's small windows, read by the source database's driver (see the module): the
    :class:`~transfer_platform.sources.base.DriverReads` of a PostgreSQL source."""

    #: the windows' row counts are asked of the database, without Spark (``steps.window_rows``)
    counts_without_spark = True

    def __init__(self, reader: JdbcReader, request: ReadRequest) -> None:
        self.reader, self.model = reader, request.model
        self.read_timeout = reader.source.read_timeout_seconds
        self._conn: psycopg.Connection | None = None

    @classmethod
    def proven(cls, reader: JdbcReader, request: ReadRequest) -> DirectReads | None:
        """Direct reads of ``request.model`` from ``reader``'s source, if its columns are all read
        as they are (asked with the read's query returning no row); ``None`` otherwise, or if the
        question fails (the caller then proves the read through Spark, which names the failure)."""
        dialect = reader.dialect
        types = dialect.direct_types
        if not types or request.model.change_column.kind == "text":
            return None
        direct = cls(reader, request)
        # LIMIT 0, not WHERE 1=0: PostgreSQL plans WHERE 1=0 over a large table at the full scan's
        # cost (JIT-compiled, parallel workers started: 40-300 ms at 16-50M rows), LIMIT 0 at none
        sql = f"SELECT * FROM {derived_table(reader.query_for(request), dialect=dialect.text)} LIMIT 0"
        try:
            described = direct._run(sql, request, "schema", rows=False)
        except ConnectionFailure:  # a source that stopped sending: said at once
            raise
        except Exception:  # noqa: BLE001 - any refusal: Spark's check names it
            _LOG.debug("asking the source for the read's types failed; the read goes through Spark", exc_info=True)
            return None
        found = dict(described)
        for column in request.model.columns:
            if types.get(found.get(column.name_in_source)) != column.data_type:
                direct.close()
                return None
        return direct

    def close(self) -> None:
        """Close the connection to the source (opened again if asked for more)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @contextmanager
    def _transaction(self, request: ReadRequest) -> Iterator[psycopg.Connection]:
        """The held connection in a READ ONLY transaction in UTC with the read's search path,
        rolled back after; a failure closes the connection."""
        reader = self.reader
        if self._conn is None or self._conn.closed:
            self._conn = connect_postgres(reader.source.connection, what=reader.what)
        conn = self._conn
        try:
            with ReadDeadline(conn, self.read_timeout):
                conn.execute("SET TRANSACTION READ ONLY")
                conn.execute("SET LOCAL TIME ZONE 'UTC'")
                schema = reader.default_schema_for(request)
                if schema is not None:
                    conn.execute("SELECT set_config('search_path', %s, true)", (search_path_value(schema),))
            yield conn
            with ReadDeadline(conn, self.read_timeout):
                conn.rollback()
        except SourceStalled:
            self.close()
            raise reader.stalled() from None
        except BaseException:
            self.close()
            raise

    def _run(self, sql: str, request: ReadRequest, kind: str, *, rows: bool):
        """``sql`` in :meth:`_transaction`: ``(name, type oid)`` of its columns, and its rows."""
        from transfer_platform.sources.jdbc import count_statement

        count_statement(self.reader.source.name, kind)
        with self._transaction(request) as conn, ReadDeadline(conn, self.read_timeout):
            cursor = conn.execute(sql)
            described = [(d.name, d.type_code) for d in cursor.description or []]
            fetched = cursor.fetchall() if rows else []
        return (described, fetched) if rows else described

    def keys_unique(self, request: ReadRequest) -> bool:
        """:meth:`JdbcReader.keys_unique <transfer_platform.sources.jdbc.JdbcReader.keys_unique>`
        on the held connection."""
        sql = self.reader.unique_key_query(request)
        if sql is None:
            return False
        try:
            _, found = self._run(sql, request, "catalog", rows=True)
        except ConnectionFailure:  # a source that stopped sending: said at once
            raise
        except Exception:  # noqa: BLE001 - any refusal: the window is read as any other
            _LOG.debug("asking %s for a unique index failed", self.reader.what, exc_info=True)
            return False
        return bool(found and found[0][0])

    def copy_out(self, request: ReadRequest, types: dict[str, str]) -> Iterator[bytes]:
        """``request``'s window in PostgreSQL's binary COPY format, each column cast to the type
        ``types`` names for it in the destination (destination name -> type), in chunks of
        ``relay.CHUNK_BYTES``, on the held connection (:meth:`_transaction`): the query of
        :func:`~transfer_platform.sources.relay.relay_for` in one slice. Any failure of the source
        is raised as :class:`StreamFailed`."""
        from transfer_platform.sources.relay import copied_out, relay_for

        relay = relay_for(self.reader, request, 1, here=True)
        try:
            with self._transaction(request) as conn:
                yield from copied_out(conn, relay.copy_out(0, types), self.read_timeout)
        except ConnectionFailure:  # a source that stopped sending: not read again (it would wait as long)
            raise
        except Exception as exc:  # the source's (the destination's failures close this generator)
            raise StreamFailed(f"streaming the window from {self.reader.what} failed: {first_line(exc)}") from exc

    def relay(self, request: ReadRequest, slices: int) -> RelayRead:
        """``request``'s window relayed in ``slices`` slices by Spark's tasks, each on its own
        connection to the source (:func:`~transfer_platform.sources.relay.relay_for`)."""
        from transfer_platform.sources.relay import relay_for

        return relay_for(self.reader, request, slices)

    def window_rows(self, spark: object, requests: list[ReadRequest], up_to: int) -> list[int] | None:
        """:meth:`JdbcReader.window_rows <transfer_platform.sources.jdbc.JdbcReader.window_rows>`
        on the held connection (``spark`` is not used)."""
        from transfer_platform.sources.jdbc import window_counts

        if not requests:
            return []
        try:
            _, found = self._run(self.reader.window_rows_sql(requests, up_to), requests[0], "rows", rows=True)
        except ConnectionFailure:  # a source that stopped sending: said at once
            raise
        except Exception:  # noqa: BLE001 - any refusal: the windows' reads report it properly
            _LOG.debug("counting the rows of %s's windows failed; every window is read", self.reader.what,
                       exc_info=True)
            return None
        return window_counts(found, len(requests), up_to)

    def read_together(self, requests: list[ReadRequest], schema: pa.Schema, up_to: int | None = None) -> pa.Table:
        """The rows of each of ``requests`` as the model's columns (``schema``: their Arrow types)
        and ``WINDOW_COLUMN``, as Spark's read of them brings them; at most ``up_to + 1`` rows."""
        sql = f"SELECT * FROM {self.reader.together_sql(requests)}" + ("" if up_to is None else f" LIMIT {int(up_to) + 1}")
        described, rows = self._run(sql, requests[0], "rows", rows=True)
        values = dict(zip((name for name, _ in described), zip(*rows, strict=True) if rows else
                          [()] * len(described), strict=True))
        arrays = {c.destination_name: pa.array(values[c.name_in_source], type=schema.field(c.destination_name).type)
                  for c in self.model.columns}
        arrays[WINDOW_COLUMN] = pa.array(values[WINDOW_COLUMN], type=pa.int32())
        return pa.table(arrays)
