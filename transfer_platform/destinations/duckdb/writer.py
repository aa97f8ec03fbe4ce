"""DuckDB destination: one database file per recipient, written with the ``duckdb`` package; the
SQL writer's algorithm (``destinations/sql/``) with :class:`~.dialect.DuckdbDialect`'s statements.

The file is held only while a transfer runs. The writer opens it read-write at ``prepare``'s
first step (or the delete sweep's first write) and closes it at :meth:`DuckdbWriter.close`, at
the end of the transfer, when DuckDB checkpoints its write-ahead log into the file. DuckDB locks
the file for the process that opens it read-write: no other process can open it meanwhile, not
even read-only. So a reader opens the file between transfers, and a transfer that starts while
another process holds the file (a reader or another transfer) waits up to
``Tuning.lock_wait_seconds`` for it, then is refused with DuckDB's own message (the holder's PID)
and the fix; nothing is written. Reads without side effects (a dry run, integrity checks) open the
file read-only for as long as they read, and create nothing (:mod:`.file`).

What DuckDB does its own way is where a window is staged, since DuckDB reads Parquet and Arrow in
place: a window read alone is staged by Spark's executors as Parquet files under
``<file>.tp/staging/<model>/<window>/`` (each Python worker writes its partition as it was read,
``Tuning.batch_rows`` rows at a time, and sums it up with ``destinations/staged_files.py``'s
``stage_partition``; without the Delta staging's shuffle and sort on the key, which cost three times
DuckDB's whole commit at 1M rows), so the window never sits whole in this process; NULL keys and
last-modified values are refused from the summaries, a key twice by one ``GROUP BY`` of the staged
files in DuckDB, before anything is committed. A window already here as Arrow is registered with
DuckDB as it is (no copy). The SQL writer's commit then merges from those files or that table in
one transaction. What a killed transfer left in staging is removed by the model's next transfer,
under the model's lock (an exclusive ``flock`` on ``<file>.tp/locks/<model>.lock``).
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
from transfer_platform.core.sql import quote_ident
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import (
    WindowLoad,
    arrow_schema,
    duplicate_key_error,
    empty_frame,
    frame_batches,
    refuse_bad_rows,
    staging_suffix,
)
from transfer_platform.destinations.duckdb.dialect import DuckdbDialect
from transfer_platform.destinations.duckdb.file import DuckdbFile, first_line
from transfer_platform.destinations.duckdb.probe import probe_destination
from transfer_platform.destinations.sql.session import DuckdbSession
from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable
from transfer_platform.destinations.staged_files import Staged, refuse_staged, stage
from transfer_platform.errors import DataError
from transfer_platform.phases import log_phase
from transfer_platform.storage.locks import FileLock, Locks
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.duckdb import DuckdbDestination

if TYPE_CHECKING:
    import duckdb
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.destinations.skeleton import Stale
    from transfer_platform.probes import Check

#: the writer's own folder beside the database file: ``<file>.tp/{locks,staging}``
WORK_SUFFIX = ".tp"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass
class StagedWindow(StagingTable):
    """A staged window: ``table`` is its relation (``read_parquet([...])``, a registered Arrow
    table, or ``None`` for no row), ``staged`` what was summed up of it, ``batch`` the Arrow
    table itself when it is here."""

    staged: Staged | None = None
    batch: pa.Table | None = None


class DuckdbWriter(SqlWriter):
    DIALECT = DuckdbDialect()

    def __init__(self, destination: DuckdbDestination, tuning: Tuning = DEFAULT) -> None:
        super().__init__(destination, tuning, container=destination.connection.schema_ or "main",
                         what=f"DuckDB destination '{destination.name}' (file {Path(destination.connection.path)})")
        self.schema = self.container
        self.path = Path(destination.connection.path)
        self.work = self.path.with_name(self.path.name + WORK_SUFFIX)
        self.file = DuckdbFile(self.path, self.what, self.tuning)
        self._locks = Locks()
        self._reader: duckdb.DuckDBPyConnection | None = None  # a read-only hold, while one reads

    @property
    def conn(self) -> duckdb.DuckDBPyConnection:
        return self.file.conn

    @property
    def session(self) -> DuckdbSession:
        return DuckdbSession(self._reader if self._reader is not None else self.file.conn)

    @contextmanager
    def _read(self) -> Iterator[bool]:
        """Statements read the file as it is: the writer's hold, else a read-only one for the
        read (False: there is no file, nothing was committed)."""
        with self.file.read() as conn:
            if conn is None:
                yield False
                return
            self._reader = conn
            try:
                yield True
            finally:
                self._reader = None

    def check(self) -> None:
        self.session.all("SELECT 1")

    def close(self) -> None:
        """Close the file (DuckDB checkpoints it) and release the models' locks."""
        self.file.close()
        self._locks.release_all()

    def __del__(self) -> None:  # a writer dropped without close() still releases the file
        if getattr(self, "file", None) is not None:
            self.close()

    def _table_label(self, table: str) -> str:
        return f"{table} in {self.path}"

    # -- prepare's steps -----------------------------------------------------------------------

    def _create_container(self) -> None:
        self.session.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(self.schema)}")

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """The model's lock file under ``<file>.tp/locks/`` (an exclusive ``flock``, released when
        the writer closes or its process dies); a second transfer waits up to
        ``Tuning.lock_wait_seconds``, then is refused naming the first."""
        self._locks.hold(model.model_name, FileLock(self.work / "locks", model.model_name, transfer_id),
                         destination=self.name, wait_seconds=self.tuning.lock_wait_seconds)

    def _staging_folder(self, model: ModelConfig, window: str = "") -> Path:
        return self.work / "staging" / model.model_name / window

    def _clean_staging(self, model: ModelConfig) -> None:
        shutil.rmtree(self._staging_folder(model), ignore_errors=True)

    def _read_states(self, model: ModelConfig) -> tuple[ModelState, ModelState | Stale | None]:
        with self._read() as found:
            return super()._read_states(model) if found else (ModelState(), None)

    # -- a window: staged where DuckDB reads it in place ------------------------------------------

    def _create_staging(self, load: WindowLoad, *, in_memory: bool) -> StagedWindow:
        """A folder for the staged files (a window read alone), or the name the Arrow table is
        registered under (a window already here)."""
        model = load.model
        window = f"{staging_suffix(model.model_name, load.transfer_id)}_{uuid.uuid4().hex[:12]}"
        name = f"tp_arrow_{window}" if in_memory else str(self._staging_folder(model, window))
        target = self.refresh_table(model) if load.into_refresh else self.table(model)
        return StagedWindow(name, None, target, target)

    def _stage_frame(self, frame: DataFrame, window: StagedWindow, load: WindowLoad) -> StagedWindow:
        model = load.model
        state = self.read_state(model, "refresh_state" if load.into_refresh else "state")
        # without the shuffle and sort on the key: a key twice is found by DuckDB (_refuse)
        staged = stage(frame, model, state, str(Path(window.name).resolve()), None,
                       batch_rows=self.tuning.batch_rows, on_key=False)
        log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=model.model_name,
                  rows=staged.rows, in_memory_bytes=staged.volume, files=len(staged.files))
        window.staged = staged
        if staged.files:
            window.table = f"read_parquet([{', '.join(_literal(f) for f in staged.files)}])"
        return window

    def _stage_arrow(self, batch: pa.Table, window: StagedWindow, load: WindowLoad) -> StagedWindow:
        model = load.model
        batch = batch.select(arrow_schema(model).names)
        state = self.read_state(model, "refresh_state" if load.into_refresh else "state")
        window.staged, window.batch = Staged.of_batch(batch, model, state=state), batch
        self.conn.register(window.name, batch)  # read in place by DuckDB: no copy
        log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=model.model_name,
                  rows=window.staged.rows, in_memory_bytes=window.staged.volume)
        window.table = quote_ident(window.name) if batch.num_rows else None
        return window

    def _refuse(self, window: StagedWindow, load: WindowLoad) -> None:
        """A window here: the Arrow checks. A staged one: the executors' summaries (NULL keys and
        last-modified values), then one ``GROUP BY`` of the staged files for a key twice (the
        files are not sorted on the key: a Spark shuffle costs more than DuckDB's scan)."""
        model, staged = load.model, window.staged
        if window.batch is not None:
            refuse_bad_rows(window.batch, model, self.name)
        else:
            refuse_staged(staged, model, self.name)
            if window.table is not None:
                keys = [quote_ident(c.destination_name) for c in model.primary_key]
                row = self.session.one(f"SELECT {', '.join(keys)}, count(*) FROM {window.table} GROUP BY ALL "
                                       "HAVING count(*) > 1 LIMIT 1")
                if row is not None:
                    names = [c.destination_name for c in model.primary_key]
                    raise duplicate_key_error(model, self.name, dict(zip(names, row, strict=False)), row[-1])
        window.rows, window.delta_rows, window.volume, window.marked = (
            staged.rows, staged.delta_rows, staged.volume, staged.marked)
        window.max_last_modified = (None if staged.max_last_modified is None
                                    else model.change_column.moment(staged.max_last_modified))

    @contextmanager
    def _rows_refused(self, load: WindowLoad) -> Iterator[None]:
        import duckdb

        try:
            yield
        except (duckdb.ConversionException, duckdb.ConstraintException, duckdb.InvalidInputException) as exc:
            raise DataError(f"DuckDB refused the window's rows: {first_line(exc)}", model=load.model.model_name,
                            destination=self.name,
                            fix="check that each column's data_type matches the source values (a json "
                                "column must hold valid JSON text)") from None

    def _merge(self, load: WindowLoad, window: StagedWindow) -> int:
        if window.table is None:  # no row
            return 0 if load.model.removes_deleted_rows else window.marked
        return super()._merge(load, window)

    def _remove_staging(self, window: StagedWindow, load: WindowLoad) -> None:
        if window.name.startswith("tp_arrow_"):
            if self.file.is_open:
                with suppress(Exception):
                    self.conn.unregister(window.name)
            return
        shutil.rmtree(window.name, ignore_errors=True)

    # -- outside a transfer's windows ------------------------------------------------------------

    def has_table(self, model: ModelConfig) -> bool:
        with self._read() as found:
            return found and self._exists(model.model_name)

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """The table read into this process as Arrow (read-only, the file closed at once), then
        handed to Spark: fine for millions of rows, not for a table beyond the driver's memory."""
        with self._read() as found:
            if not found or not self._exists(model.model_name):
                return empty_frame(spark, model)
            names = ", ".join(quote_ident(c) for c in self._columns(model.model_name))
            table = self._reader.sql(f"SELECT {names} FROM {self.table(model)}").to_arrow_table()
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
        name, deleted = f"tp_delete_{staging_suffix(model.model_name, transfer_id)}", 0
        for batch in frame_batches(frame.select(*columns), schema, self.tuning.delete_batch_rows):
            with self.session.transaction():
                self.conn.register(name, batch)
                try:
                    deleted += self.session.execute(self.dialect.delete_matching(self.table(model), quote_ident(name),
                                                                                 columns))
                finally:
                    self.conn.unregister(name)
        return deleted

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        return probe_destination(self, models, target)
