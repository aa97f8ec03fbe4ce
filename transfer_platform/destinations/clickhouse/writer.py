"""ClickHouse destination: the SQL writer (``destinations/sql/``) through clickhouse-connect. Without
transactions, a window's rows go into a clone of the table holding its parts (hard links), its
state into the clone's comment, and one ``EXCHANGE TABLES`` swaps both in: a transfer killed
anywhere leaves the table as it was (the next one drops what it left). A window into an empty table
is held here as Arrow, checked here, and inserted straight into the clone."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations import base
from transfer_platform.destinations.clickhouse import dialect as sql
from transfer_platform.destinations.clickhouse import session as ch
from transfer_platform.destinations.skeleton import next_state
from transfer_platform.destinations.sql.session import ClickhouseSession
from transfer_platform.destinations.sql.state import TableComments
from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable
from transfer_platform.errors import ConnectionFailure, DataError, SchemaMismatch
from transfer_platform.probes import ProbePlan, Step
from transfer_platform.storage.locks import LeaseLock
from transfer_platform.tuning import DEFAULT, Tuning

if TYPE_CHECKING:
    import pyarrow as pa
    from clickhouse_connect.driver.client import Client
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.base import WindowLoad
    from transfer_platform.vendors.clickhouse import ClickhouseDestination

LOCK_PREFIX = "_tp_lock_"
#: rows per insert of a window held here into its clone: each insert is a part sorted on the key,
#: and many small parts of a ReplacingMergeTree cost background merges after the swap (one insert
#: of a whole 1M-row window was slower still: its Arrow serialization)
CLONE_BLOCK_ROWS = 100_000
#: the range of DateTime64 and Date32 (ClickHouse would clamp a value outside it)
EARLIEST, LATEST = "1900-01-01", "2299-12-31"


class LockTable(LeaseLock):
    """A model's lock: the table ``_tp_lock_<model hash>``, created (never ``IF NOT EXISTS``:
    ClickHouse creates a name once) with its holder's record in its comment, renewed at each commit;
    a gone holder's renamed away (one taker wins the rename), then dropped, or put back if what was
    renamed is a new holder's."""

    def __init__(self, writer: ClickhouseWriter, model: str, transfer_id: str) -> None:
        self.session, self.dialect, self.database = writer.session, writer.dialect, writer.container
        self.name = LOCK_PREFIX + base.staging_suffix(model, "").rstrip("_")
        self.table, self.transfer_id = self.dialect.qualified(self.database, self.name), transfer_id

    def _run(self, statement: str, refused: int) -> bool:
        from clickhouse_connect.driver.exceptions import DatabaseError

        try:
            self.session.execute(statement)
        except DatabaseError as exc:
            if ch.error_code(exc) != refused:
                raise
            return False
        return True

    def read(self, name: str = "") -> dict | None:  # the lock's, or the table ``name``'s
        row = self.session.one(self.dialect.comment(self.database, name or self.name))
        try:
            return None if row is None else json.loads(row[0])
        except ValueError:
            return {}

    def take(self, within: float) -> bool:
        return self._run(f"CREATE TABLE {self.table} (held UInt8) ENGINE = Memory COMMENT {sql.literal(self.record())}",
                         ch.TABLE_EXISTS)

    def clear(self, held: dict) -> None:
        gone_name = f"{LOCK_PREFIX}gone_{uuid.uuid4().hex[:12]}"
        gone = self.dialect.qualified(self.database, gone_name)
        if not self._run(f"RENAME TABLE {self.table} TO {gone}", ch.UNKNOWN_TABLE):
            return  # released meanwhile
        if self.read(gone_name) == held or not self._run(f"RENAME TABLE {gone} TO {self.table}", ch.TABLE_EXISTS):
            self.session.execute(self.dialect.drop_table(gone))

    def renew(self) -> None:
        self.session.execute(self.dialect.set_comment(self.table, self.record()))

    def release(self) -> None:
        self.session.execute(self.dialect.drop_table(self.table))


class ClickhouseWriter(SqlWriter):
    DIALECT = sql.ClickhouseDialect()

    def __init__(self, destination: ClickhouseDestination, tuning: Tuning = DEFAULT) -> None:
        super().__init__(destination, tuning, container=destination.connection.database,
                         what=f"ClickHouse destination '{destination.name}'")
        self._swap: tuple[str, str] | None = None  # (table, its clone) of the commit under way

    @property
    def client(self) -> Client:
        if self._conn is None:
            self._conn = ch.connect(self.destination, self.what)
        return self._conn

    @property
    def session(self) -> ClickhouseSession:
        return ClickhouseSession(self.client)

    @contextmanager
    def _translated_errors(self) -> Iterator[None]:
        from clickhouse_connect.driver.exceptions import ClickHouseError, OperationalError

        try:
            yield
        except ClickHouseError as exc:
            code = ch.error_code(exc)
            if code == ch.ACCESS_DENIED:
                raise ch.missing_privilege(self.destination, self.what, exc) from None
            if isinstance(exc, OperationalError) or code in (*ch.LOGIN_REFUSED, ch.UNKNOWN_DATABASE):
                raise ch.connection_error(self.destination, self.what, exc) from None
            raise

    def _create_container(self) -> None:
        """A chDB folder's database is created if missing (the folder is the recipient's own); a
        server's must exist (the loader is granted rights on it, not CREATE DATABASE)."""
        if self.destination.connection.path is not None:
            self.session.execute(f"CREATE DATABASE IF NOT EXISTS {self.dialect.quote(self.container)}")

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        with self._translated_errors():
            self._create_container()
            self._locked.hold(model.model_name, LockTable(self, model.model_name, transfer_id), destination=self.name,
                             wait_seconds=self.tuning.lock_wait_seconds)

    def _plan_columns(self, model: ModelConfig):
        if model.last_modified.data_type not in sql.VERSION_TYPES:
            raise SchemaMismatch(
                f"model '{model.model_name}' -> destination '{self.name}': its last-modified column "
                f"'{model.last_modified.destination_name}' is of type {model.last_modified.data_type}; a "
                "ClickHouse table orders versions by a timestamp, date or integer (ReplacingMergeTree). Fix: "
                "give the model a last-modified column of one of those types")
        return super()._plan_columns(model)

    # -- rows: inserted as Arrow from this process (an embedded chDB folder is open in it only) --

    def _load_frame(self, frame: DataFrame, staging: str, model: ModelConfig) -> None:
        self._insert_all(base.typed(frame.toArrow(), model), staging, model)

    def _insert_all(self, table: pa.Table, into: str, model: ModelConfig, rows: int | None = None) -> None:
        rows = rows or self.tuning.batch_rows
        for start in range(0, table.num_rows, rows):
            batch = table.slice(start, rows)
            _refuse_out_of_range(batch, model, self.name)
            with self._translated_errors():
                self.client.insert_arrow(into, batch)  # a qualified name is taken as it is

    # -- the empty-table load: the window held here, scanned here, inserted into the clone --------

    def _stage_frame(self, frame: DataFrame, staging: StagingTable, load: WindowLoad) -> StagingTable:
        return self._stage_arrow(base.typed(frame.toArrow(), load.model), staging, load)

    def _stage_arrow(self, batch: pa.Table, staging: StagingTable, load: WindowLoad) -> StagingTable:
        if staging.into_empty:
            staging.held = batch
        else:
            self._insert_all(batch, staging.table, load.model)
        return self._staged(staging, load)

    def _refuse(self, staging: StagingTable, load: WindowLoad) -> None:
        if not staging.into_empty:
            return super()._refuse(staging, load)
        model, batch = load.model, staging.held
        _refuse_out_of_range(batch, model, self.name)
        base.refuse_bad_rows(batch, model, self.name)
        with self._translated_errors():
            state = self.read_state(model, "refresh_state" if load.into_refresh else "state")
        staging.rows = batch.num_rows
        staging.max_last_modified, staging.delta_rows = base.batch_changes(batch, model, state)
        staging.marked = base.newly_marked(batch, model, state)

    def _leave_out_marked(self, staging: StagingTable, load: WindowLoad) -> None:
        import pyarrow.compute as pc

        staging.held = staging.held.filter(pc.invert(base.marked_mask(staging.held, load.model)))

    def _publish_empty_load(self, staging: StagingTable, load: WindowLoad) -> ModelState:
        with self._atomically(load):
            self._insert_all(staging.held.combine_chunks(), self._clone(staging), load.model, CLONE_BLOCK_ROWS)
            size = self.session.one(self.dialect.table_size(self.container, f"{staging.name}_swap"))
            staging.volume = int((size or (0,))[0] or 0)
            state = next_state(self.read_state(load.model, "refresh_state" if load.into_refresh else "state"), load,
                               staging.max_last_modified)
            self._write_state(load, state)
        return state

    # -- the commit ---------------------------------------------------------------------------------

    @contextmanager
    def _atomically(self, load: WindowLoad | None = None) -> Iterator[None]:
        """The rows go into a clone of the table (:meth:`_clone`), the state into the clone's comment
        (:meth:`_write_state`), then one ``EXCHANGE TABLES`` swaps both in (a window without rows
        changes the table's comment alone); the model's lock is renewed after."""
        self._swap = None
        yield
        if self._swap is not None:
            self.session.execute(self.dialect.exchange(*self._swap))
            self.session.execute(self.dialect.drop_table(self._swap[1]))
        if load is not None:
            self._locked.renew(load.model.model_name)

    def _clone(self, staging: StagingTable) -> str:
        clone = self.dialect.qualified(self.container, f"{staging.name}_swap")
        for statement in (self.dialect.drop_table(clone), self.dialect.clone_ddl(clone, staging.target),
                          self.dialect.attach_all(clone, staging.target)):
            self.session.execute(statement)
        self._swap = (staging.target, clone)
        return clone

    def _merge(self, load: WindowLoad, staging: StagingTable) -> int:
        model, removed = load.model, staging.marked
        if model.removes_deleted_rows:
            removed = int(self.session.one(self.dialect.removed_count(staging.table, staging.target, model))[0])
        self.session.execute(self.dialect.window_insert(self._clone(staging), staging.table, staging.target, model,
                                                        [c.destination_name for c in model.columns]))
        return removed

    def _write_state(self, load: WindowLoad, state: ModelState) -> None:
        table = (self._swap[1] if self._swap else
                 self.refresh_table(load.model) if load.into_refresh else self.table(load.model))
        self.session.execute(self.dialect.set_comment(table, TableComments.comment(state, load.transfer_id)))

    def _delete_staged(self, staging: StagingTable, columns: list[str]) -> int:
        deleted = int(self.session.one(self.dialect.sweep_count(staging.table, staging.target, columns))[0])
        if deleted:
            with self._atomically():
                self.session.execute(self.dialect.sweep_insert(self._clone(staging), staging.table, staging.target,
                                                               columns))
        return deleted

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        live, aside = self.table(model), self.refresh_table(model)
        self.session.execute(self.dialect.set_comment(aside, TableComments.comment(state, transfer_id)))
        if not self._exists(model.model_name):
            return self._rename(model, [(aside, model.model_name)])
        self.session.execute(self.dialect.exchange(live, aside))
        self.session.execute(self.dialect.drop_table(aside))

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """The table as its readers see it (``FINAL``), read here as Arrow, then handed to Spark:
        fine for millions of rows, not for a table beyond the driver's memory."""
        with self._translated_errors():
            if not self._exists(model.model_name):
                return base.empty_frame(spark, model)
            names = ", ".join(self.dialect.quote(n) for n in self._columns(model.model_name))
            table = base.typed(self.client.query_arrow(f"SELECT {names} FROM {self.table(model)} FINAL"), model)
        return spark.createDataFrame(table) if table.num_rows else base.empty_frame(spark, model)

    def _probe_plan(self, models: list[ModelConfig], name: str) -> ProbePlan:
        """Each step on probe tables dropped at once; a refused one names the GRANT ClickHouse says
        is missing (a chDB folder has no users: no grant is checked)."""
        from clickhouse_connect.driver.exceptions import ClickHouseError

        c, d = self.destination.connection, self.dialect
        table, clone, staging = (d.qualified(self.container, name + suffix) for suffix in ("", "_c", "_s"))

        def connect() -> None:  # the database created if it is missing, then found
            try:
                self._create_container()
                if not self.session.one(d.database_exists(self.container))[0]:
                    raise ConnectionFailure(self.what, reason=f"database {self.container!r} does not exist or is not "
                                            "visible", fix=f"create it (CREATE DATABASE {d.quote(self.container)}) "
                                            "as an administrator and grant the loader its rights on it (docs/permissions.md)")
            except ClickHouseError as exc:
                raise ConnectionFailure(self.what, reason=ch.first_line(exc)) from None

        def fix(exc: Exception) -> str:
            if ch.error_code(exc) == ch.ACCESS_DENIED:
                return ch.missing_privilege(self.destination, self.what, exc).grant
            return "check the server's log; the loader's grants are in docs/permissions.md"

        steps = [Step(step, fix, statements) for step, statements in [
            ("create tables (model, staging, swap and lock tables)",
             [f"CREATE TABLE {table} (id Int64, lm Int64, v Nullable(String), _tp_deleted UInt8 DEFAULT 0) "
              "ENGINE = ReplacingMergeTree(lm, _tp_deleted) ORDER BY id",
              f"CREATE TABLE {staging} (id Nullable(Int64), lm Nullable(Int64), v Nullable(String)) ENGINE = MergeTree "
              "ORDER BY tuple()", f"CREATE TABLE {clone} AS {table} COMMENT '{{}}'"]),
            ("insert and read rows (staging, the window's swap)",
             [f"INSERT INTO {staging} VALUES (1, 1, 'a')",
              f"INSERT INTO {clone} (id, lm, v) SELECT assumeNotNull(id), assumeNotNull(lm), v FROM {staging}",
              f"SELECT count() FROM {clone} FINAL"]),
            ("attach parts, swap tables and set comments (a window's commit, its state)",
             [d.attach_all(clone, table), d.exchange(table, clone), d.set_comment(table, "{}")]),
            ("add and drop columns (schema evolution)",
             [f"ALTER TABLE {table} ADD COLUMN w Nullable(Int64)", f"ALTER TABLE {table} DROP COLUMN w"]),
            ("drop tables (staging, swap, full refresh)", [d.drop_table(t, if_exists=False) for t in (clone, staging, table)]),
        ]]
        return ProbePlan(f"open chDB folder {c.path} (no users: no grant checked)" if c.path is not None else
                         f"log in to database {c.database!r} as {c.username or 'default'!r}", connect,
                         lambda exc: getattr(exc, "fix", "") or "check the connection settings", steps, ClickHouseError,
                         ch.first_line, cleanup=[d.drop_table(t) for t in (table, clone, staging)],
                         endpoint=None if c.path is not None else (c.host, c.server_port))


def _refuse_out_of_range(batch: pa.Table, model: ModelConfig, destination: str) -> None:
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
