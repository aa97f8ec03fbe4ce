"""ClickHouse destination: the SQL writer's algorithm (``destinations/sql/``) with
:class:`~.dialect.ClickhouseDialect`'s statements, through clickhouse-connect (a server over
HTTP(S), or an embedded chDB data folder).

**How a window becomes visible at once** (ClickHouse has no multi-statement transactions):

1. the window's rows are inserted (``insert_arrow``) into a staging table of Nullable columns and
   scanned once: a NULL key or last-modified value, or a key twice, is refused by name;
2. a clone of the model's table is made aside (``CREATE TABLE ... AS``) whose **comment is the
   window's new state**; the live table's parts are attached to it (``ATTACH PARTITION ALL FROM``:
   hard links, no row copied); the staged rows are inserted into it (soft deletes as
   ``_tp_deleted`` rows);
3. one ``EXCHANGE TABLES`` swaps the clone and the live table: the rows and the state (the
   comment, which ``_transfer_status`` shows) change in that one atomic step; the old table is
   dropped.

A reader sees the previous rows and state, or the new ones; never a part of a window, never a
watermark ahead of or behind the rows. A transfer killed anywhere leaves the live table as it was
(the clone and the staging table are dropped by the model's next transfer, under its lock). A
window without rows changes the comment alone (one ``ALTER ... MODIFY COMMENT``). A full refresh is
built in a table aside whose comment is its progress, and published by one ``EXCHANGE TABLES``.

Readers read with ``FINAL`` (``ReplacingMergeTree``: per key the latest last-modified version,
the last inserted at an equal value, hidden when deleted).

**One transfer of a model at a time**: a lock table ``_tp_lock_<model hash>`` created (not ``IF
NOT EXISTS``: ClickHouse creates a name once) with the holder in its comment (transfer, host,
process, lease end); dropped at ``close``. A second transfer waits up to
``Tuning.lock_wait_seconds``, then is refused naming the holder; a lock whose holder's process is
gone (same host) or whose lease ended (renewed at each commit) is taken over.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import (
    WindowResult,
    arrow_schema,
    batch_changes,
    marked_mask,
    newly_marked,
    refuse_bad_rows,
    staging_suffix,
)
from transfer_platform.destinations.clickhouse.dialect import (
    VERSION_TYPES,
    ClickhouseDialect,
    literal,
    split_qualified,
)
from transfer_platform.destinations.clickhouse.session import (
    TABLE_EXISTS,
    UNKNOWN_TABLE,
    ClickhouseSession,
    connect,
    error_code,
    translated_errors,
)
from transfer_platform.destinations.skeleton import next_state
from transfer_platform.destinations.sql.state import TableComments
from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable
from transfer_platform.errors import DataError, SchemaMismatch
from transfer_platform.storage.locks import Lock, Locks, process_gone
from transfer_platform.tuning import DEFAULT, Tuning

if TYPE_CHECKING:
    import pyarrow as pa
    from clickhouse_connect.driver.client import Client
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.base import WindowLoad
    from transfer_platform.probes import Check
    from transfer_platform.vendors.clickhouse import ClickhouseDestination

LOCK_PREFIX = "_tp_lock_"
#: a model lock's lease: renewed at each commit; a holder silent longer is taken over
LOCK_LEASE_SECONDS = 900
#: while another transfer holds a model's lock: the pause between attempts
_RETRY_SECONDS = 0.2
#: rows per insert of a window held here into its clone: each insert is a part sorted on the key,
#: and many small parts of a ReplacingMergeTree cost background merges after the swap (one insert
#: of a whole 1M-row window was slower still: its Arrow serialization)
CLONE_BLOCK_ROWS = 100_000
#: the range of DateTime64 and Date32
EARLIEST, LATEST = "1900-01-01", "2299-12-31"


def _now_us() -> int:
    return int(time.time() * 1_000_000)


@dataclass
class ClickhouseStaging(StagingTable):
    """A window's staging table; a window into an empty table is held here as Arrow until its
    commit inserts it."""

    held: pa.Table | None = None


class LockTable(Lock):
    """A model's lock as the table ``table``, created (not ``IF NOT EXISTS``: ClickHouse creates a
    name once) with its holder in its comment (transfer, host, process, lease end); renewed at each
    commit, dropped at release; taken over when its holder's process is gone (same host) or its
    lease ended (:func:`_stale`)."""

    poll_seconds = _RETRY_SECONDS

    def __init__(self, session: ClickhouseSession, table: str, dialect: ClickhouseDialect, transfer_id: str) -> None:
        self.session, self.table, self.dialect, self.transfer_id = session, table, dialect, transfer_id
        self._held: dict | None = None  # the holder's, as last read

    def _text(self) -> str:
        return json.dumps({"transfer_id": self.transfer_id, "host": socket.gethostname(), "pid": os.getpid(),
                           "since_us": _now_us(), "lease_end_us": _now_us() + LOCK_LEASE_SECONDS * 1_000_000})

    def take(self, within: float) -> bool:
        from clickhouse_connect.driver.exceptions import DatabaseError

        try:
            self.session.execute(f"CREATE TABLE {self.table} (held UInt8) ENGINE = Memory COMMENT "
                                 f"{literal(self._text())}")
        except DatabaseError as exc:
            if error_code(exc) != TABLE_EXISTS:
                raise
            return False
        return True

    def _read_holder(self, table: str) -> dict | None:
        database, name = split_qualified(table)
        row = self.session.one(self.dialect.comment(database, name))
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except ValueError:
            return {}

    def take_over(self) -> bool:
        """A dead holder's lock renamed away (one taker wins the rename) and dropped; if what was
        renamed is not that holder's (a new holder came meanwhile) it is put back."""
        from clickhouse_connect.driver.exceptions import DatabaseError

        self._held = self._read_holder(self.table)
        if self._held is None or not _stale(self._held):
            return False
        database, _ = split_qualified(self.table)
        gone = self.dialect.qualified(database, f"{LOCK_PREFIX}gone_{uuid.uuid4().hex[:12]}")
        try:
            self.session.execute(f"RENAME TABLE {self.table} TO {gone}")
        except DatabaseError as exc:
            if error_code(exc) == UNKNOWN_TABLE:
                return True
            raise
        if self._read_holder(gone) != self._held:
            with suppress(DatabaseError):
                self.session.execute(f"RENAME TABLE {gone} TO {self.table}")
                return True
        self.session.execute(self.dialect.drop_table(gone))
        return True

    def holder(self) -> str:
        held = self._held
        return ("another session" if not held else
                f"transfer {held.get('transfer_id')!r} on {held.get('host')}, process {held.get('pid')}")

    def renew(self) -> None:
        self.session.execute(self.dialect.set_comment(self.table, self._text()))

    def release(self) -> None:
        self.session.execute(self.dialect.drop_table(self.table))


class ClickhouseWriter(SqlWriter):
    DIALECT = ClickhouseDialect()
    STAGING = ClickhouseStaging

    def __init__(self, destination: ClickhouseDestination, tuning: Tuning = DEFAULT) -> None:
        super().__init__(destination, tuning, container=destination.connection.database,
                         what=f"ClickHouse destination '{destination.name}'")
        self._client: Client | None = None
        self._locks = Locks()  # the models' lock tables this writer holds

    # -- connection ---------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = connect(self.destination, self.what)
        return self._client

    @property
    def session(self) -> ClickhouseSession:
        return ClickhouseSession(self.client)

    def _translated_errors(self) -> AbstractContextManager[None]:
        return translated_errors(self.destination, self.what)

    def close(self) -> None:
        """Release the models' locks (their tables dropped) and the client."""
        if self._client is not None:
            self._locks.release_all()
            with suppress(Exception):
                self._client.close()
            self._client = None
        self._locks.clear()

    def check(self) -> None:
        with self._translated_errors():
            self._create_container()
            if not self.session.one(("SELECT count() FROM system.databases WHERE name = {db:String}",
                                     {"db": self.container}))[0]:
                from transfer_platform.destinations.clickhouse.session import connection_error

                raise connection_error(self.destination, self.what, RuntimeError(
                    f"Code: 81. DB::Exception: database {self.container} does not exist"))

    def _create_container(self) -> None:
        """An embedded chDB folder's database is created if missing (the folder is the recipient's
        own); a server's must exist (the loader is granted rights on it, not CREATE DATABASE)."""
        if self.destination.connection.path is not None:
            self.session.execute(f"CREATE DATABASE IF NOT EXISTS {self.dialect.quote(self.container)}")

    # -- the model's lock ---------------------------------------------------------------------

    def _lock_table(self, model: ModelConfig) -> str:
        return self.dialect.qualified(self.container, LOCK_PREFIX + staging_suffix(model.model_name, "").rstrip("_"))

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """One transfer of a model to this database at a time, however they were started (see the
        module); a second waits up to ``Tuning.lock_wait_seconds``, then ``TransferRunning``."""
        if model.model_name in self._locks:
            return
        with self._translated_errors():
            self._create_container()
            self._locks.hold(model.model_name, LockTable(self.session, self._lock_table(model), self.dialect,
                                                         transfer_id),
                             destination=self.name, wait_seconds=self.tuning.lock_wait_seconds)

    def _renew_lock(self, model: ModelConfig, transfer_id: str) -> None:
        self._locks.renew(model.model_name)

    # -- the state: each model table's comment (the record's state store, ``sql/state.py``); a
    # window's is carried by the clone swapped in with its rows (TableComments.comment)

    # -- the table's shape ----------------------------------------------------------------------

    def _plan_columns(self, model: ModelConfig):
        if model.last_modified.data_type not in VERSION_TYPES:
            raise SchemaMismatch(
                f"model '{model.model_name}' -> destination '{self.name}': its last-modified column "
                f"'{model.last_modified.destination_name}' is of type {model.last_modified.data_type}; a "
                "ClickHouse table orders versions by a timestamp, date or integer (ReplacingMergeTree). Fix: "
                "give the model a last-modified column of one of those types")
        return super()._plan_columns(model)

    def _begin_refresh(self, model: ModelConfig, live: ModelState) -> ModelState:
        """The table aside created with its progress in its comment, in one statement."""
        state = ModelState(high_watermark=live.high_watermark)
        aside = self.refresh_table(model)
        with self._translated_errors():
            self.session.execute(self.dialect.drop_table(aside))
            self.session.execute(self.dialect.table_ddl(aside, model, comment=TableComments.comment(state, "")))
        return state

    # -- a window -------------------------------------------------------------------------------

    def _atomically(self, load: WindowLoad | None = None) -> AbstractContextManager[None]:
        """Nothing to open: a window becomes visible by one ``EXCHANGE TABLES`` of a clone holding
        its rows and, in its comment, its state (:meth:`_commit`, the module's docstring)."""
        return nullcontext()

    def _load_arrow(self, batch: pa.Table, staging: str, load: WindowLoad) -> None:
        self._insert(batch, staging, load.model)

    def _load_frame(self, frame: DataFrame, staging: str, model: ModelConfig) -> None:
        """Spark's rows brought to this process as Arrow (:meth:`_arrow`), then inserted
        ``Tuning.batch_rows`` rows per ``insert_arrow`` (an embedded chDB folder is open in this
        process only)."""
        self._insert_all(self._arrow(frame, model), staging, model)

    def _arrow(self, frame: DataFrame, model: ModelConfig) -> pa.Table:
        """The window whole, in columns (``toArrow``), in the model's Arrow types."""
        import pyarrow as pa

        wanted = arrow_schema(model)
        table = frame.toArrow()
        return pa.table([table.column(n).cast(wanted.field(n).type) for n in table.column_names],
                        names=table.column_names)

    def _insert_all(self, table: pa.Table, into: str, model: ModelConfig, rows: int | None = None) -> None:
        rows = rows or self.tuning.batch_rows
        for start in range(0, table.num_rows, rows):
            self._insert(table.slice(start, rows), into, model)

    def _insert(self, batch: pa.Table, staging: str, model: ModelConfig) -> None:
        if not batch.num_rows:
            return
        _refuse_out_of_range(batch, model, self.name)
        database, name = split_qualified(staging)
        with self._translated_errors():
            self.client.insert_arrow(name, batch, database=database)

    # -- the empty-table load, clone-and-exchange: a window into an empty table (a backfill's first
    # into an empty table, a full refresh's first into its table aside) is not staged: its rows,
    # here as Arrow already, are checked here (a NULL key or last-modified value, a key twice, a
    # date out of range: refused by name) and inserted straight into the clone the commit swaps
    # in; each row is written once. Any other window is staged and merged.

    def _stage_frame(self, frame: DataFrame, staging: StagingTable, load: WindowLoad) -> StagingTable:
        if not staging.into_empty:
            return super()._stage_frame(frame, staging, load)
        staging.held = self._arrow(frame, load.model)
        return self._staged(staging, load)

    def _stage_arrow(self, batch: pa.Table, staging: StagingTable, load: WindowLoad) -> StagingTable:
        if not staging.into_empty:
            return super()._stage_arrow(batch, staging, load)
        staging.held = batch
        return self._staged(staging, load)

    def _refuse(self, staging: StagingTable, load: WindowLoad) -> None:
        """A window held here is scanned here: the same refusals, the same counts."""
        if not staging.into_empty:
            super()._refuse(staging, load)
            return
        model, batch = load.model, staging.held
        _refuse_out_of_range(batch, model, self.name)
        refuse_bad_rows(batch, model, self.name)
        with self._translated_errors():
            state = self.read_state(model, "refresh_state" if load.into_refresh else "state")
        staging.rows = batch.num_rows
        staging.max_last_modified, staging.delta_rows = batch_changes(batch, model, state)
        staging.marked = newly_marked(batch, model, state)

    def _remove_staging(self, staging: StagingTable, load: WindowLoad) -> None:
        if staging.into_empty:  # nothing staged; a clone left is dropped by the clean-up
            staging.held = None
            return
        super()._remove_staging(staging, load)

    def _commit(self, staging: StagingTable | None, load: WindowLoad) -> WindowResult:
        """The window's rows and state swapped in together (see the module's docstring)."""
        if staging is not None and staging.into_empty:
            return super()._commit(staging, load)  # the empty-table load (_publish_empty_load)
        model = load.model
        column = "refresh_state" if load.into_refresh else "state"
        target = self.refresh_table(model) if load.into_refresh else self.table(model)
        with self._translated_errors():
            state = self.read_state(model, column)
            if staging is None:
                rows = delta_rows = volume = rows_deleted = 0
                max_lm = None
                new_state = next_state(state, load, max_lm)
                comment = TableComments.comment(new_state, load.transfer_id)
                self.session.execute(self.dialect.set_comment(target, comment))
            else:
                rows, delta_rows, volume = staging.rows, staging.delta_rows, staging.volume
                max_lm = staging.max_last_modified
                new_state = next_state(state, load, max_lm)
                rows_deleted = staging.marked
                if model.removes_deleted_rows:
                    rows_deleted = int(self.session.one(self.dialect.removed_count(staging.table, target, model))[0])
                columns = [c.destination_name for c in model.columns]
                self._swap_in(target, staging.name, TableComments.comment(new_state, load.transfer_id),
                              self.dialect.window_insert("{clone}", staging.table, target, model, columns))
            self._renew_lock(model, load.transfer_id)
        return WindowResult(rows, delta_rows, volume, max_lm, new_state, rows_deleted)

    def _leave_out_marked(self, staging: StagingTable, load: WindowLoad) -> None:
        import pyarrow.compute as pc

        staging.held = staging.held.filter(pc.invert(marked_mask(staging.held, load.model)))

    def _publish_empty_load(self, staging: StagingTable, load: WindowLoad) -> ModelState:
        """A window held here, inserted into the clone exchanged with the table, its state in the
        clone's comment; its size is the clone's parts before the swap."""
        model = load.model
        target = self.refresh_table(model) if load.into_refresh else self.table(model)

        def fill(clone: str) -> None:
            self._insert_all(staging.held.combine_chunks(), clone, model, CLONE_BLOCK_ROWS)
            size = self.session.one(self.dialect.table_size(self.container, f"{staging.name}_swap"))
            staging.volume = int((size or (0,))[0] or 0)

        new_state = next_state(self.read_state(model, "refresh_state" if load.into_refresh else "state"), load,
                               staging.max_last_modified)
        self._swap_in(target, staging.name, TableComments.comment(new_state, load.transfer_id), fill)
        self._renew_lock(model, load.transfer_id)
        return new_state

    def _swap_in(self, target: str, staging_name: str, comment: str, insert: str | Callable[[str], None]) -> None:
        """``target`` replaced by a clone holding its parts, ``insert``'s rows (``{clone}`` in its
        text; or a function given the clone) and ``comment``: one ``EXCHANGE TABLES``."""
        clone = self.dialect.qualified(self.container, f"{staging_name}_swap")
        session = self.session
        session.execute(self.dialect.drop_table(clone))
        session.execute(self.dialect.clone_ddl(clone, target, comment))
        session.execute(self.dialect.attach_all(clone, target))
        if callable(insert):
            insert(clone)
        else:
            session.execute(insert.replace("{clone}", clone, 1))
        session.execute(self.dialect.exchange(target, clone))
        session.execute(self.dialect.drop_table(clone))

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        """The refresh built aside takes the live table's place with its state, in one
        ``EXCHANGE TABLES`` (or one ``RENAME`` when there is no live table yet)."""
        live, aside = self.table(model), self.refresh_table(model)
        self.session.execute(self.dialect.set_comment(aside, TableComments.comment(state, transfer_id)))
        if self._exists(model.model_name):
            self.session.execute(self.dialect.exchange(live, aside))
            self.session.execute(self.dialect.drop_table(aside))
        else:
            self._rename(model, [(aside, model.model_name)])

    # -- outside a transfer's windows ------------------------------------------------------------

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        """Remove the rows whose key and last-modified value ``frame`` holds (a row changed since is
        left alone): staged, then a ``_tp_deleted`` row for each, swapped in like a window (the
        table's state kept)."""
        chosen = [*model.primary_key, model.last_modified]
        columns = [c.destination_name for c in chosen]
        name = self.staging_table_name(model, transfer_id)
        staging = StagingTable(name, self.dialect.qualified(self.container, name), model.model_name, self.table(model))
        self._create_staging_table(staging, model, chosen, logged=False)
        try:
            self._load_frame(frame.select(*columns), staging.table, model)
            with self._translated_errors():
                row = self.session.one(self.dialect.comment(self.container, model.model_name))
                sweep = self.dialect.sweep_insert("{clone}", staging.table, staging.target, model, columns)
                deleted = int(self.session.one(self.dialect.sweep_count(staging.table, staging.target, columns))[0])
                if deleted:
                    self._swap_in(staging.target, name, row[0] if row else "", sweep)
                return deleted
        finally:
            with self._translated_errors():
                self.session.execute(self.dialect.drop_table(staging.table))

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """The table as its readers see it (``FINAL``), read into this process as Arrow, then handed
        to Spark: fine for millions of rows, not for a table beyond the driver's memory."""
        import pyarrow as pa

        from transfer_platform.destinations.base import empty_frame

        with self._translated_errors():
            if not self._exists(model.model_name):
                return empty_frame(spark, model)
            names = list(self._columns(model.model_name))
            table = self.client.query_arrow(
                f"SELECT {', '.join(self.dialect.quote(n) for n in names)} FROM {self.table(model)} FINAL")
        wanted = arrow_schema(model)
        table = pa.table([table.column(n).cast(wanted.field(n).type) if n in wanted.names else table.column(n)
                          for n in table.column_names], names=table.column_names)
        return spark.createDataFrame(table) if table.num_rows else empty_frame(spark, model)

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        from transfer_platform.destinations.clickhouse.probe import probe_destination

        return probe_destination(self, models, target)




def _stale(holder: dict) -> bool:
    """A holder whose lease ended, or whose process (on this host) is gone."""
    if not holder:
        return False
    if holder.get("lease_end_us", 0) < _now_us():
        return True
    return process_gone(holder.get("host"), holder.get("pid"))


def _refuse_out_of_range(batch: pa.Table, model: ModelConfig, destination: str) -> None:
    """A timestamp or date outside DateTime64's and Date32's range (1900-01-01 to 2299-12-31),
    refused by name before any row is written (ClickHouse would clamp it)."""
    import datetime as dt

    import pyarrow.compute as pc

    low, high = dt.date.fromisoformat(EARLIEST), dt.date.fromisoformat(LATEST)
    for c in model.columns:
        if c.data_type not in ("timestamp", "date") or c.destination_name not in batch.column_names:
            continue
        column = batch.column(c.destination_name)
        bounds = pc.min_max(column)
        for value in (bounds["min"].as_py(), bounds["max"].as_py()):
            if value is None:
                continue
            day = value.date() if isinstance(value, dt.datetime) else value
            if day < low or day > high:
                raise DataError(
                    f"column '{c.destination_name}' holds {value}, outside {EARLIEST} to {LATEST} (the range of "
                    "ClickHouse's DateTime64 and Date32); nothing was written", model=model.model_name,
                    destination=destination, fix=f"correct the value in the source, or leave {c.destination_name} "
                                                 "out of the model")

