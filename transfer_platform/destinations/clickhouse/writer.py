"""ClickHouse destination: the SQL writer's algorithm (``destinations/sql/``) with
:class:`~.dialect.ClickhouseDialect`'s statements, through clickhouse-connect.

**A window becomes visible at once** without multi-statement transactions: its rows are staged
(``insert_arrow``) and scanned once, then inserted into a clone of the model's table that holds the
table's parts (hard links, no row copied) and, in its comment, the window's new state; one
``EXCHANGE TABLES`` swaps rows and state in together (:meth:`ClickhouseWriter._atomically`). A
reader sees the previous rows and state or the new ones; a transfer killed anywhere leaves the live
table as it was (its staging table and clone are dropped by the model's next transfer, under its
lock). A window into an empty table is not staged: held here as Arrow, checked here, inserted
straight into the clone. A full refresh is built in a table aside whose comment is its progress.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import (
    arrow_schema,
    batch_changes,
    empty_frame,
    marked_mask,
    newly_marked,
    refuse_bad_rows,
    staging_suffix,
)
from transfer_platform.destinations.clickhouse.dialect import VERSION_TYPES, ClickhouseDialect, literal
from transfer_platform.destinations.clickhouse.session import (
    TABLE_EXISTS,
    UNKNOWN_DATABASE,
    UNKNOWN_TABLE,
    ClickhouseSession,
    connect,
    connection_error,
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
#: rows per insert of a window held here into its clone: each insert is a part sorted on the key,
#: and many small parts of a ReplacingMergeTree cost background merges after the swap (one insert
#: of a whole 1M-row window was slower still: its Arrow serialization)
CLONE_BLOCK_ROWS = 100_000
#: the range of DateTime64 and Date32 (ClickHouse would clamp a value outside it)
EARLIEST, LATEST = "1900-01-01", "2299-12-31"


def _now_us() -> int:
    return int(time.time() * 1_000_000)


@dataclass
class ClickhouseStaging(StagingTable):
    held: pa.Table | None = None  # a window into an empty table, held here as Arrow until its commit


class LockTable(Lock):
    """A model's lock: the table ``_tp_lock_<model hash>``, created (never ``IF NOT EXISTS``:
    ClickHouse creates a name once) with its holder in its comment (transfer, host, process, lease
    end); renewed at each commit, dropped at release; taken over when its holder's process is gone
    (same host) or its lease ended."""

    def __init__(self, writer: ClickhouseWriter, name: str, transfer_id: str) -> None:
        self.session, self.dialect, self.database = writer.session, writer.dialect, writer.container
        self.name, self.table, self.transfer_id = name, writer.dialect.qualified(writer.container, name), transfer_id
        self._held: dict | None = None  # the holder's, as last read

    def _text(self) -> str:
        now = _now_us()
        return json.dumps({"transfer_id": self.transfer_id, "host": socket.gethostname(), "pid": os.getpid(),
                           "since_us": now, "lease_end_us": now + LOCK_LEASE_SECONDS * 1_000_000})

    def _run(self, statement: str, refused: int) -> bool:
        """Run ``statement``: False if ClickHouse refuses it with the error code ``refused``."""
        from clickhouse_connect.driver.exceptions import DatabaseError

        try:
            self.session.execute(statement)
        except DatabaseError as exc:
            if error_code(exc) != refused:
                raise
            return False
        return True

    def _holder(self, name: str) -> dict | None:
        row = self.session.one(self.dialect.comment(self.database, name))
        try:
            return None if row is None else json.loads(row[0])
        except ValueError:
            return {}

    def take(self, within: float) -> bool:
        return self._run(f"CREATE TABLE {self.table} (held UInt8) ENGINE = Memory COMMENT {literal(self._text())}",
                         TABLE_EXISTS)

    def take_over(self) -> bool:
        """A gone holder's lock renamed away (one taker wins the rename), then dropped; put back if
        what was renamed is a new holder's."""
        self._held = held = self._holder(self.name)
        if not held or not (held.get("lease_end_us", 0) < _now_us()
                            or process_gone(held.get("host"), held.get("pid"))):
            return False
        gone_name = f"{LOCK_PREFIX}gone_{uuid.uuid4().hex[:12]}"
        gone = self.dialect.qualified(self.database, gone_name)
        if not self._run(f"RENAME TABLE {self.table} TO {gone}", UNKNOWN_TABLE):
            return True  # released meanwhile
        if self._holder(gone_name) != held and self._run(f"RENAME TABLE {gone} TO {self.table}", TABLE_EXISTS):
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
        self._swap: tuple[str, str] | None = None  # (table, its clone) of the commit under way

    # -- connection ---------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = connect(self.destination, self.what)
        return self._client

    @property
    def session(self) -> ClickhouseSession:
        return ClickhouseSession(self.client)

    def _translated_errors(self):
        return translated_errors(self.destination, self.what)

    def close(self) -> None:
        """Release the models' locks (their tables dropped), then the client."""
        if self._client is not None:
            self._locks.release_all()
            with suppress(Exception):
                self._client.close()
            self._client = None
        self._locks.clear()

    def check(self) -> None:
        with self._translated_errors():
            self._create_container()
            if not self.session.one(self.dialect.database_exists(self.container))[0]:
                raise connection_error(self.destination, self.what, RuntimeError(f"Code: {UNKNOWN_DATABASE}."))

    def _create_container(self) -> None:
        """A chDB folder's database is created if missing (the folder is the recipient's own); a
        server's must exist (the loader is granted rights on it, not CREATE DATABASE)."""
        if self.destination.connection.path is not None:
            self.session.execute(f"CREATE DATABASE IF NOT EXISTS {self.dialect.quote(self.container)}")

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        with self._translated_errors():
            self._create_container()
            name = LOCK_PREFIX + staging_suffix(model.model_name, "").rstrip("_")
            self._locks.hold(model.model_name, LockTable(self, name, transfer_id), destination=self.name,
                             wait_seconds=self.tuning.lock_wait_seconds)

    # -- the table ---------------------------------------------------------------------------------

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
        state, aside = ModelState(high_watermark=live.high_watermark), self.refresh_table(model)
        with self._translated_errors():
            self.session.execute(self.dialect.drop_table(aside))
            self.session.execute(self.dialect.target_ddl(aside, model, TableComments.comment(state, "")))
        return state

    # -- a window: loaded as Arrow (an embedded chDB folder is open in this process only) -----------

    def _stage_frame(self, frame: DataFrame, staging: StagingTable, load: WindowLoad) -> StagingTable:
        return self._stage_arrow(self._arrow(frame, load.model), staging, load)

    def _stage_arrow(self, batch: pa.Table, staging: ClickhouseStaging, load: WindowLoad) -> StagingTable:
        if not staging.into_empty:
            return super()._stage_arrow(batch, staging, load)
        staging.held = batch
        return self._staged(staging, load)

    def _load_arrow(self, batch: pa.Table, staging: str, load: WindowLoad) -> None:
        self._insert_all(batch, staging, load.model)

    def _arrow(self, frame: DataFrame, model: ModelConfig) -> pa.Table:
        """Spark's rows here, whole (``toArrow``), in the model's Arrow types."""
        import pyarrow as pa

        wanted, table = arrow_schema(model), frame.toArrow()
        return pa.table([table.column(n).cast(wanted.field(n).type) for n in table.column_names],
                        names=table.column_names)

    def _insert_all(self, table: pa.Table, into: str, model: ModelConfig, rows: int | None = None) -> None:
        rows = rows or self.tuning.batch_rows
        for start in range(0, table.num_rows, rows):
            self._insert(table.slice(start, rows), into, model)

    def _insert(self, batch: pa.Table, into: str, model: ModelConfig) -> None:
        if batch.num_rows:
            _refuse_out_of_range(batch, model, self.name)
            with self._translated_errors():
                self.client.insert_arrow(into, batch)  # a qualified name is taken as it is

    def _refuse(self, staging: ClickhouseStaging, load: WindowLoad) -> None:
        """A window held here is scanned here: the same refusals, the same counts."""
        if not staging.into_empty:
            return super()._refuse(staging, load)
        model, batch = load.model, staging.held
        _refuse_out_of_range(batch, model, self.name)
        refuse_bad_rows(batch, model, self.name)
        with self._translated_errors():
            state = self.read_state(model, "refresh_state" if load.into_refresh else "state")
        staging.rows = batch.num_rows
        staging.max_last_modified, staging.delta_rows = batch_changes(batch, model, state)
        staging.marked = newly_marked(batch, model, state)

    def _remove_staging(self, staging: StagingTable, load: WindowLoad) -> None:
        if not staging.into_empty:  # a window held here staged nothing
            super()._remove_staging(staging, load)

    # -- a window's commit ----------------------------------------------------------------------------

    @contextmanager
    def _atomically(self, load: WindowLoad | None = None) -> Iterator[None]:
        """The one hook of a commit: a window's rows go into a clone of its table (:meth:`_clone`),
        its state into the clone's comment (:meth:`_write_state`), then one ``EXCHANGE TABLES``
        swaps rows and state in together (a window without rows changes the comment alone); the
        model's lock is renewed after."""
        self._swap = None
        yield
        if self._swap is not None:
            table, clone = self._swap
            self.session.execute(self.dialect.exchange(table, clone))
            self.session.execute(self.dialect.drop_table(clone))
        if load is not None:
            self._locks.renew(load.model.model_name)

    def _clone(self, staging: StagingTable) -> str:
        """A clone of the window's target, holding its parts and its comment, to be swapped in."""
        clone = self.dialect.qualified(self.container, f"{staging.name}_swap")
        for statement in (self.dialect.drop_table(clone), self.dialect.clone_ddl(clone, staging.target),
                          self.dialect.attach_all(clone, staging.target)):
            self.session.execute(statement)
        self._swap = (staging.target, clone)
        return clone

    def _merge(self, load: WindowLoad, staging: StagingTable) -> int:
        """The staged rows into the clone (soft deletes as ``_tp_deleted`` rows); the rows deleted."""
        model, removed = load.model, staging.marked
        if model.removes_deleted_rows:
            removed = int(self.session.one(self.dialect.removed_count(staging.table, staging.target, model))[0])
        self.session.execute(self.dialect.window_insert(self._clone(staging), staging.table, staging.target, model,
                                                        [c.destination_name for c in model.columns]))
        return removed

    def _write_state(self, load: WindowLoad, state: ModelState) -> None:
        """The state in the comment of the clone to be swapped in (without one, of the table)."""
        table = (self._swap[1] if self._swap else
                 self.refresh_table(load.model) if load.into_refresh else self.table(load.model))
        self.session.execute(self.dialect.set_comment(table, TableComments.comment(state, load.transfer_id)))

    def _leave_out_marked(self, staging: ClickhouseStaging, load: WindowLoad) -> None:
        import pyarrow.compute as pc

        staging.held = staging.held.filter(pc.invert(marked_mask(staging.held, load.model)))

    def _publish_empty_load(self, staging: ClickhouseStaging, load: WindowLoad) -> ModelState:
        """The window held here inserted into the clone; its size is the clone's parts."""
        model = load.model
        with self._atomically(load):
            clone = self._clone(staging)
            self._insert_all(staging.held.combine_chunks(), clone, model, CLONE_BLOCK_ROWS)
            size = self.session.one(self.dialect.table_size(self.container, f"{staging.name}_swap"))
            staging.volume = int((size or (0,))[0] or 0)
            state = next_state(self.read_state(model, "refresh_state" if load.into_refresh else "state"), load,
                               staging.max_last_modified)
            self._write_state(load, state)
        return state

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        """The refresh built aside takes the live table's place with its state: one ``EXCHANGE
        TABLES`` (one ``RENAME`` when there is no live table yet)."""
        live, aside = self.table(model), self.refresh_table(model)
        self.session.execute(self.dialect.set_comment(aside, TableComments.comment(state, transfer_id)))
        if not self._exists(model.model_name):
            return self._rename(model, [(aside, model.model_name)])
        self.session.execute(self.dialect.exchange(live, aside))
        self.session.execute(self.dialect.drop_table(aside))

    # -- outside a transfer's windows ------------------------------------------------------------

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        """A ``_tp_deleted`` row for each delivered row whose key and last-modified value ``frame``
        holds (a row changed since is left alone), swapped in like a window (the comment kept)."""
        columns = [c.destination_name for c in (*model.primary_key, model.last_modified)]
        name = self.staging_table_name(model, transfer_id)
        staging = StagingTable(name, self.dialect.qualified(self.container, name), model.model_name, self.table(model))
        self._create_staging_table(staging, model, [*model.primary_key, model.last_modified], logged=False)
        try:
            self._insert_all(self._arrow(frame.select(*columns), model), staging.table, model)
            with self._translated_errors():
                deleted = int(self.session.one(self.dialect.sweep_count(staging.table, staging.target, columns))[0])
                if deleted:
                    with self._atomically():
                        self.session.execute(self.dialect.sweep_insert(
                            self._clone(staging), staging.table, staging.target, columns))
                return deleted
        finally:
            with self._translated_errors():
                self.session.execute(self.dialect.drop_table(staging.table))

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """The table as its readers see it (``FINAL``), read into this process as Arrow, then handed
        to Spark: fine for millions of rows, not for a table beyond the driver's memory."""
        import pyarrow as pa

        with self._translated_errors():
            if not self._exists(model.model_name):
                return empty_frame(spark, model)
            names = ", ".join(self.dialect.quote(n) for n in self._columns(model.model_name))
            table = self.client.query_arrow(f"SELECT {names} FROM {self.table(model)} FINAL")
        wanted = arrow_schema(model)
        table = pa.table([table.column(n).cast(wanted.field(n).type) if n in wanted.names else table.column(n)
                          for n in table.column_names], names=table.column_names)
        return spark.createDataFrame(table) if table.num_rows else empty_frame(spark, model)

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        from transfer_platform.destinations.clickhouse.probe import probe_destination

        return probe_destination(self, target)


def _refuse_out_of_range(batch: pa.Table, model: ModelConfig, destination: str) -> None:
    """A timestamp or date outside ``EARLIEST`` to ``LATEST``, refused by name before any row is
    written."""
    import pyarrow.compute as pc

    for c in model.columns:
        if c.data_type in ("timestamp", "date") and c.destination_name in batch.column_names:
            bounds = pc.min_max(batch.column(c.destination_name))
            for value in (bounds["min"].as_py(), bounds["max"].as_py()):
                if value is not None and not EARLIEST <= value.isoformat()[:10] <= LATEST:
                    raise DataError(
                        f"column '{c.destination_name}' holds {value}, outside {EARLIEST} to {LATEST} (the range "
                        "of ClickHouse's DateTime64 and Date32); nothing was written", model=model.model_name,
                        destination=destination, fix=f"correct the value in the source, or leave "
                                                     f"{c.destination_name} out of the model")
