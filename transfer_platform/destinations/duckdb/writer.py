"""DuckDB destination: one database file per recipient, written with the ``duckdb`` package.

The file is held only while a transfer runs. The writer opens it read-write at ``prepare``'s
first step (or the delete sweep's first write) and closes it at :meth:`DuckdbWriter.close`, at
the end of the transfer, when DuckDB checkpoints its write-ahead log into the file. DuckDB locks
the file for the process that opens it read-write: no other process can open it meanwhile, not
even read-only. So a reader opens the file between transfers, and a transfer that starts while
another process holds the file (a reader or another transfer) waits up to
``Tuning.lock_wait_seconds`` for it, then is refused with DuckDB's own message (the holder's PID)
and the fix; nothing is written. Reads without side effects (a dry run, integrity checks) open the
file read-only for as long as they read, and create nothing.

Per window, in the order of ``destinations/skeleton.py``: a window read alone is staged by
Spark's executors as Parquet files under ``<file>.tp/staging/<model>/<window>/`` (each Python
worker writes its partition as it was read, ``Tuning.batch_rows`` rows at a time, and sums it up
with ``destinations/staged_files.py``'s ``stage_partition``; without the Delta staging's shuffle and sort
on the key, which cost three times DuckDB's whole commit at 1M rows), so the window never sits
whole in this process; NULL keys and last-modified values are refused from the summaries, a key
twice by one ``GROUP BY`` of the staged files in DuckDB, before anything is committed. A window
already here as Arrow is registered with DuckDB as it is (no copy). One DuckDB transaction then applies
the soft deletes, upserts the rows (``INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE`` the
incoming row is newer, or as new and different: an older version read again never overwrites a
newer one) and records the model's new state in ``_transfer_status`` in the same file. A crash
before COMMIT leaves rows and watermark as they were; what a killed transfer left in staging is
removed by the model's next transfer, under the model's lock (an exclusive ``flock`` on
``<file>.tp/locks/<model>.lock``, as the Delta destination's).

A full refresh is built aside in ``_tp_refresh_<model hash>`` (its progress in
``_transfer_status.refresh_state``) and published in one transaction (the live table dropped, the
aside table renamed in its place, the state recorded). Schema evolution: an added column is added
(``ALTER TABLE ... ADD COLUMN``), a removed one dropped only with ``allow_column_drop`` (or by a
full refresh), a changed type or primary key refused (``SchemaMismatch``).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.columns import (
    ColumnChanges,
    plan_columns,
)
from transfer_platform.core.sql import marked_deleted, plan_soft_delete, plan_upsert, quote_ident
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import (
    WindowLoad,
    WindowResult,
    arrow_schema,
    duplicate_key_error,
    empty_frame,
    frame_batches,
    refuse_bad_rows,
    staging_suffix,
)
from transfer_platform.destinations.duckdb.catalog import STATUS_TABLE, Catalog, column_type
from transfer_platform.destinations.duckdb.file import File, fetch_all, fetch_one, first_line
from transfer_platform.destinations.duckdb.probe import Probing
from transfer_platform.destinations.locks import FolderLocks
from transfer_platform.destinations.skeleton import STALE, Writer
from transfer_platform.destinations.staged_files import Staged, refuse_staged, stage
from transfer_platform.errors import DataError
from transfer_platform.phases import log_phase
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.duckdb import DuckdbDestination

if TYPE_CHECKING:
    import duckdb
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.destinations.skeleton import Stale

#: the writer's own folder beside the database file: ``<file>.tp/{locks,staging}``
WORK_SUFFIX = ".tp"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass
class _Window:
    """A staged window: its relation in SQL (``read_parquet([...])`` or a registered Arrow
    table), what was summed up of it, and the Arrow table itself when it is here."""

    relation: str | None
    staged: Staged
    batch: pa.Table | None = None


class DuckdbWriter(File, Catalog, Probing, Writer):
    def __init__(self, destination: DuckdbDestination, tuning: Tuning = DEFAULT) -> None:
        super().__init__(destination, tuning)
        connection = destination.connection
        self.path = Path(connection.path)
        self.schema = connection.schema_ or "main"
        self.work = self.path.with_name(self.path.name + WORK_SUFFIX)
        self.what = f"DuckDB destination '{destination.name}' (file {self.path})"
        self._conn: duckdb.DuckDBPyConnection | None = None
        self._locks = FolderLocks()

    def _staging_folder(self, model: ModelConfig, window: str = "") -> Path:
        return self.work / "staging" / model.model_name / window

    # -- prepare's primitives --------------------------------------------------------------------

    def _reach(self) -> None:
        conn = self.conn
        fetch_all(conn, f"CREATE SCHEMA IF NOT EXISTS {quote_ident(self.schema)}")
        fetch_all(conn, f"CREATE TABLE IF NOT EXISTS {self.status_table} (data_model_name VARCHAR PRIMARY KEY, "
                     "transfer_last_updated_at TIMESTAMPTZ, high_watermark TIMESTAMPTZ, state JSON, "
                     "refresh_state JSON, last_transfer_id VARCHAR, updated_at TIMESTAMPTZ)")

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """The model's lock file under ``<file>.tp/locks/`` (an exclusive ``flock``, released when
        the writer closes or its process dies); a second transfer waits up to
        ``Tuning.lock_wait_seconds``, then is refused naming the first."""
        self._locks.acquire(self.work / "locks", model.model_name, transfer_id, destination=self.name,
                            wait_seconds=self.tuning.lock_wait_seconds)

    def _clean_staging(self, model: ModelConfig) -> None:
        shutil.rmtree(self._staging_folder(model), ignore_errors=True)

    def _read_states(self, model: ModelConfig) -> tuple[ModelState, ModelState | Stale | None]:
        with self._read() as conn:
            if conn is None or not self._exists(conn, STATUS_TABLE):
                return ModelState(), None
            row = fetch_one(conn, f"SELECT state::VARCHAR, refresh_state::VARCHAR FROM {self.status_table} "
                               "WHERE data_model_name = ?", [model.model_name])
            state = ModelState.from_json(row[0] if row else None)
            if row is None or row[1] is None:
                return state, None
            if not self._columns_match(conn, model, self.refresh_name(model)):
                return state, STALE
            return state, ModelState.from_json(row[1])

    def _begin_refresh(self, model: ModelConfig, live: ModelState) -> ModelState:
        state = ModelState(high_watermark=live.high_watermark)
        aside = self.refresh_table(model)
        with self._transaction() as conn:
            fetch_all(conn, f"DROP TABLE IF EXISTS {aside}")
            fetch_all(conn, self._target_ddl(aside, model, if_not_exists=False))
            self._record(conn, model, refresh=state)
        return state

    def _plan_columns(self, model: ModelConfig) -> ColumnChanges:
        conn, table = self.conn, self.table(model)
        fetch_all(conn, self._target_ddl(table, model))
        existing = self._columns(conn, model.model_name)
        return plan_columns(model, self.name, f"{table} in {self.path}", existing,
                            self._primary_key(conn, model.model_name), lambda column: column_type(column.data_type))

    def _apply_columns(self, model: ModelConfig, planned: ColumnChanges, state: ModelState) -> tuple[str, ...]:
        table, changes = self.table(model), []
        if not (planned.added or planned.dropped):
            return ()
        with self._transaction() as conn:
            for column in (c for c in model.columns if c.destination_name in planned.added):
                fetch_all(conn, f"ALTER TABLE {table} ADD COLUMN {quote_ident(column.destination_name)} "
                             f"{column_type(column.data_type)}")
                changes.append(f"added column {column.destination_name} ({column.data_type}) to {table}; rows "
                               "delivered before hold NULL in it until they change or a full refresh runs")
            for name in planned.dropped:
                fetch_all(conn, f"ALTER TABLE {table} DROP COLUMN {quote_ident(name)}")
                changes.append(f"dropped column {name} from {table} (no longer in the model)")
        return tuple(changes)

    # -- a window --------------------------------------------------------------------------------

    def _target_state(self, load: WindowLoad) -> ModelState:
        return self._state(self.conn, load.model, "refresh_state" if load.into_refresh else "state")

    def _create_staging(self, load: WindowLoad, *, in_memory: bool) -> str:
        """A folder for the staged files (a window read alone), or the name the Arrow table is
        registered under (a window already here)."""
        window = f"{staging_suffix(load.model.model_name, load.transfer_id)}_{uuid.uuid4().hex[:12]}"
        return f"tp_arrow_{window}" if in_memory else str(self._staging_folder(load.model, window))

    def _stage_frame(self, frame: DataFrame, folder: str, load: WindowLoad) -> _Window:
        model = load.model
        # without the shuffle and sort on the key: a key twice is found by DuckDB (_refuse)
        staged = stage(frame, model, self._target_state(load), str(Path(folder).resolve()), None,
                       batch_rows=self.tuning.batch_rows, on_key=False)
        log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=model.model_name,
                  rows=staged.rows, in_memory_bytes=staged.volume, files=len(staged.files))
        files = ", ".join(_literal(f) for f in staged.files)
        return _Window(f"read_parquet([{files}])" if staged.files else None, staged)

    def _stage_arrow(self, batch: pa.Table, name: str, load: WindowLoad) -> _Window:
        model = load.model
        batch = batch.select(arrow_schema(model).names)
        staged = Staged.of_batch(batch, model, state=self._target_state(load))
        self.conn.register(name, batch)  # read in place by DuckDB: no copy
        log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=model.model_name,
                  rows=staged.rows, in_memory_bytes=staged.volume)
        return _Window(quote_ident(name) if batch.num_rows else None, staged, batch)

    def _refuse(self, window: _Window, load: WindowLoad) -> None:
        """A window here: the Arrow checks. A staged one: the executors' summaries (NULL keys and
        last-modified values), then one ``GROUP BY`` of the staged files for a key twice (the
        files are not sorted on the key: a Spark shuffle costs more than DuckDB's scan)."""
        model = load.model
        if window.batch is not None:
            refuse_bad_rows(window.batch, model, self.name)
            return
        refuse_staged(window.staged, model, self.name)
        if window.relation is None:
            return
        keys = [quote_ident(c.destination_name) for c in model.primary_key]
        row = fetch_one(self.conn, f"SELECT {', '.join(keys)}, count(*) FROM {window.relation} GROUP BY ALL "
                              "HAVING count(*) > 1 LIMIT 1")
        if row is not None:
            names = [c.destination_name for c in model.primary_key]
            raise duplicate_key_error(model, self.name, dict(zip(names, row, strict=False)), row[-1])

    def _commit(self, window: _Window | None, load: WindowLoad) -> WindowResult:
        """One transaction: the rows merged (soft deletes applied) and the model's new state."""
        import duckdb

        model = load.model
        staged = Staged.empty() if window is None else window.staged
        max_lm = None if staged.max_last_modified is None else model.change_column.moment(staged.max_last_modified)
        target = self.refresh_table(model) if load.into_refresh else self.table(model)
        try:
            with self._transaction() as conn:
                state = self._state(conn, model, "refresh_state" if load.into_refresh else "state")
                rows_deleted = 0 if model.removes_deleted_rows else staged.marked
                if window is not None and window.relation is not None:
                    rows_deleted = self._merge(conn, model, target, window.relation, rows_deleted)
                new_state = state.after_window(load.progress, batch_max_last_modified=max_lm,
                                               configured_start=load.configured_start)
                if load.into_refresh:
                    self._record(conn, model, refresh=new_state)
                else:
                    self._record(conn, model, state=new_state, transfer_id=load.transfer_id)
        except (duckdb.ConversionException, duckdb.ConstraintException, duckdb.InvalidInputException) as exc:
            raise DataError(f"DuckDB refused the window's rows: {first_line(exc)}", model=model.model_name,
                            destination=self.name,
                            fix="check that each column's data_type matches the source values (a json "
                                "column must hold valid JSON text)") from None
        return WindowResult(staged.rows, staged.delta_rows, staged.volume, max_lm, new_state, rows_deleted)

    def _merge(self, conn: duckdb.DuckDBPyConnection, model: ModelConfig, target: str, relation: str,
               rows_deleted: int) -> int:
        """The staged rows into ``target`` in the current transaction; the rows removed."""
        keys = [c.destination_name for c in model.primary_key]
        lm = model.last_modified.destination_name
        marker, skip = model.deletion_marker, None
        if model.removes_deleted_rows:  # rows marked deleted are removed (unless older), never inserted
            skip = marked_deleted(marker.destination_name, marker.data_type)
            rows_deleted = fetch_one(conn, plan_soft_delete(
                target=target, staging=relation, primary_key=keys, last_modified=lm,
                marker=marker.destination_name, marker_type=marker.data_type))[0]
        fetch_all(conn, plan_upsert(target=target, staging=relation, columns=[c.destination_name for c in model.columns],
                                 primary_key=keys, last_modified=lm, append_only=model.is_append_only, skip=skip))
        return int(rows_deleted)

    def _remove_staging(self, staging: str, load: WindowLoad) -> None:
        if staging.startswith("tp_arrow_"):
            if self._conn is not None:
                with suppress(Exception):
                    self._conn.unregister(staging)
            return
        shutil.rmtree(staging, ignore_errors=True)

    # -- the full refresh's publish --------------------------------------------------------------

    @contextmanager
    def _publishing(self) -> Iterator[None]:
        with self._transaction():
            yield

    def _refresh_state(self, model: ModelConfig) -> ModelState:
        return self._state(self.conn, model, "refresh_state")

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        conn = self.conn
        fetch_all(conn, f"DROP TABLE IF EXISTS {self.table(model)}")
        fetch_all(conn, f"ALTER TABLE {self.refresh_table(model)} RENAME TO {quote_ident(model.model_name)}")
        self._record(conn, model, state=state, transfer_id=transfer_id, refresh=None)

    # -- outside a transfer's windows ------------------------------------------------------------

    def has_table(self, model: ModelConfig) -> bool:
        with self._read() as conn:
            return conn is not None and self._exists(conn, model.model_name)

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """The table read into this process as Arrow (read-only, the file closed at once), then
        handed to Spark: fine for millions of rows, not for a table beyond the driver's memory."""
        with self._read() as conn:
            if conn is None or not self._exists(conn, model.model_name):
                return empty_frame(spark, model)
            present = self._columns(conn, model.model_name)
            names = ", ".join(quote_ident(c) for c in present)
            table = conn.sql(f"SELECT {names} FROM {self.table(model)}").to_arrow_table()
        wanted = arrow_schema(model)
        table = pa.table([table.column(n).cast(wanted.field(n).type) if n in wanted.names else table.column(n)
                          for n in table.column_names], names=table.column_names)
        return spark.createDataFrame(table) if table.num_rows else empty_frame(spark, model)

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        """Remove the rows whose key and last-modified value ``frame`` holds (a row changed since
        is left alone): brought here ``Tuning.delete_batch_rows`` rows at a time, one Spark
        partition at a time, each batch deleted in one transaction with ``DELETE ... USING``."""
        columns = [c.destination_name for c in model.primary_key] + [model.last_modified.destination_name]
        schema = pa.schema([arrow_schema(model).field(c) for c in columns])
        match = " AND ".join(f"t.{quote_ident(c)} = s.{quote_ident(c)}" for c in columns)
        name, deleted = f"tp_delete_{staging_suffix(model.model_name, transfer_id)}", 0
        for batch in frame_batches(frame.select(*columns), schema, self.tuning.delete_batch_rows):
            with self._transaction() as conn:
                conn.register(name, batch)
                try:
                    deleted += fetch_one(conn, f"DELETE FROM {self.table(model)} AS t USING {quote_ident(name)} AS s "
                                            f"WHERE {match}")[0]
                finally:
                    conn.unregister(name)
        return deleted
