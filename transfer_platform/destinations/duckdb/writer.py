"""DuckDB destination: one database file per recipient. DuckDB locks the file for the process that
opens it read-write, against every other process, even a reader: so the file is held only while a
transfer runs, and reads without side effects (a dry run, integrity checks) open it read-only.
DuckDB reads Parquet and Arrow in place, so a window is staged there: read alone, as Parquet files
under ``<file>.tp/staging/<model>/`` written by Spark's executors as they read each partition
(without the shuffle and sort on the key, which cost three times DuckDB's whole commit at 1M
rows); read together, as its Arrow table."""

from __future__ import annotations

import shutil
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from transfer_platform.core.sql import qualified, quote_ident, quote_literal
from transfer_platform.destinations import base
from transfer_platform.destinations.duckdb.dialect import DuckdbDialect
from transfer_platform.destinations.sql.session import DuckdbSession
from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable
from transfer_platform.destinations.staged_files import Staged, refuse_staged, stage
from transfer_platform.errors import ConnectionFailure, DataError, first_line
from transfer_platform.phases import log_phase
from transfer_platform.probes import Probe, ProbePlan, Step
from transfer_platform.storage.folders import folder_fix, missing_parents, probe_folder
from transfer_platform.storage.locks import FileLock
from transfer_platform.tuning import DEFAULT, Tuning

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import duckdb
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.config.models import ModelConfig
    from transfer_platform.probes import Check
    from transfer_platform.vendors.duckdb import DuckdbDestination

NOT_A_DATABASE_FIX = ("the file at connection.path is not a DuckDB database this DuckDB can open: point "
                      "connection.path at a DuckDB database file, or at a path where no file exists yet "
                      "(the first transfer creates it)")
LOCKED_FIX = ("DuckDB lets one process write a file and no other process open it meanwhile: close the other "
              "process's connection to this file (a reader or another transfer: see its PID above; readers "
              "open the file between transfers), then run the transfer again")
#: what the probe says of a folder or a file that the first transfer creates
NEW = "it does not exist yet; the first transfer creates it"
#: what DuckDB's IOException on opening the file says, matched in order -> (reason, fix; None: the folder's)
IO_ERRORS = (("not a valid duckdb database file", "{}", NOT_A_DATABASE_FIX),
             ("lock", "the file is locked by another process ({})", LOCKED_FIX), ("", "{}", None))


class DuckdbWriter(SqlWriter):
    DIALECT = DuckdbDialect()

    def __init__(self, destination: DuckdbDestination, tuning: Tuning = DEFAULT) -> None:
        path = Path(destination.connection.path)
        super().__init__(destination, tuning, container=destination.connection.schema_ or "main",
                         what=f"DuckDB destination '{destination.name}' (file {path})")
        self.schema, self.path, self.work = self.container, path, path.with_name(path.name + ".tp")
        self._read: duckdb.DuckDBPyConnection | None = None  # a read's connection (the file held: _conn)

    # -- the file --------------------------------------------------------------------------------

    @property
    def session(self) -> DuckdbSession:
        """A read's connection (:meth:`_reading`), else the file held read-write until ``close``."""
        if self._read is None and self._conn is None:
            self._conn = self._open(read_only=False)
        return DuckdbSession(self._read or self._conn)

    def _open(self, *, read_only: bool, wait: bool = True) -> duckdb.DuckDBPyConnection:
        """The file opened (read-write: created if missing), waiting up to ``Tuning.lock_wait_seconds``
        (``wait``) while another process holds it; then refused with DuckDB's message (its PID)."""
        import duckdb

        deadline = time.monotonic() + (self.tuning.lock_wait_seconds if wait else 0)
        while True:
            try:
                if not read_only:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = duckdb.connect(str(self.path), read_only=read_only)
                conn.execute("SET TimeZone = 'UTC'").fetchall()
                return conn
            except OSError as exc:
                raise ConnectionFailure(self.what, reason=exc.strerror or str(exc),
                                        fix=folder_fix(self.path.parent)) from None
            except duckdb.ConnectionException as exc:  # this process holds the file otherwise
                if read_only:  # read-write (a writer): read through a connection like it
                    return self._open(read_only=False)
                raise ConnectionFailure(self.what, reason=first_line(exc), fix="wait for this process's read of "
                                        "the file (a dry run, an integrity check) to end, then run the transfer "
                                        "again") from None
            except duckdb.Error as exc:  # an IOException: IO_ERRORS; another (a newer storage version): not a database
                reason = first_line(exc)
                match, form, fix = (next(error for error in IO_ERRORS if error[0] in reason.lower())
                                    if isinstance(exc, duckdb.IOException) else IO_ERRORS[0])
                if match != "lock" or time.monotonic() >= deadline:
                    raise ConnectionFailure(self.what, reason=form.format(reason),
                                            fix=fix or folder_fix(self.path.parent)) from None
                time.sleep(0.2)

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Statements read the file read-only, creating nothing (no file: an empty database in memory)."""
        import duckdb

        self._read = self._open(read_only=True) if self.path.exists() else duckdb.connect()
        try:
            yield
        finally:
            self._read.close()
            self._read = None

    def close(self) -> None:
        """Close the file (DuckDB checkpoints it: readers find every commit in the file alone)."""
        if self._conn is not None:
            with suppress(Exception):
                self._conn.close()
            self._conn = None
        self._locked.release_all()

    def __del__(self) -> None:  # a writer dropped without close() still releases the file
        if getattr(self, "_locked", None) is not None:
            self.close()

    def _table_label(self, table: str) -> str:
        return f"{table} in {self.path}"

    def _create_container(self) -> None:
        self.session.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(self.schema)}")

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """An exclusive ``flock``, released when the writer closes or its process dies."""
        self._locked.hold(model.model_name, FileLock(self.work / "locks", model.model_name, transfer_id),
                         destination=self.name, wait_seconds=self.tuning.lock_wait_seconds)

    def _staging_folder(self, model: ModelConfig, window: str = "") -> Path:
        return self.work / "staging" / model.model_name / window

    def _clean_staging(self, model: ModelConfig) -> None:
        shutil.rmtree(self._staging_folder(model), ignore_errors=True)

    # -- a window, staged where DuckDB reads it in place -----------------------------------------

    def _create_staging(self, load: base.WindowLoad, *, in_memory: bool) -> StagingTable:
        return self._staging_for(load)  # its name: its Arrow table's, or its folder's

    def _stage_frame(self, frame: DataFrame, window: StagingTable, load: base.WindowLoad) -> StagingTable | None:
        state = self.read_state(load.model, "refresh_state" if load.into_refresh else "state")
        staged = stage(frame, load.model, state, str(self._staging_folder(load.model, window.name).resolve()), None,
                       batch_rows=self.tuning.batch_rows, on_key=False)  # as Spark read it: _refuse finds a key twice
        return self._in_place(window, load, staged, f"read_parquet([{', '.join(map(quote_literal, staged.files))}])",
                              lambda: refuse_staged(staged, load.model, self.name), files=len(staged.files))

    def _stage_arrow(self, batch: pa.Table, window: StagingTable, load: base.WindowLoad) -> StagingTable | None:
        batch = batch.select(base.arrow_schema(load.model).names)
        state = self.read_state(load.model, "refresh_state" if load.into_refresh else "state")
        self.session.conn.register(window.name, batch)  # read in place by DuckDB: no copy
        window.duplicates_refused = True  # by refuse_bad_rows
        return self._in_place(window, load, Staged.of_batch(batch, load.model, state), quote_ident(window.name),
                              lambda: base.refuse_bad_rows(batch, load.model, self.name))

    def _in_place(self, window: StagingTable, load: base.WindowLoad, staged: Staged, table: str,
                  refuse: Callable[[], None], **files: int) -> StagingTable | None:
        """The staged window logged, refused if it breaks a rule, then read as ``table`` (``None``: no row)."""
        log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=load.model.model_name,
                  rows=staged.rows, in_memory_bytes=staged.volume, **files)
        refuse()
        if not staged.rows:
            return None
        window.table, window.rows, window.delta_rows, window.volume, window.marked = (
            table, staged.rows, staged.delta_rows, staged.volume, staged.marked)
        if staged.max_last_modified is not None:
            window.max_last_modified = load.model.change_column.moment(staged.max_last_modified)
        return window

    def _refuse(self, window: StagingTable | None, load: base.WindowLoad) -> None:
        if window is not None:  # a key twice in files not sorted on it: one GROUP BY (cheaper than Spark's shuffle)
            self._refuse_duplicate_keys(load, window)

    @contextmanager
    def _rows_refused(self, load: base.WindowLoad) -> Iterator[None]:
        import duckdb

        try:
            yield
        except (duckdb.ConversionException, duckdb.ConstraintException, duckdb.InvalidInputException) as exc:
            raise DataError(f"DuckDB refused the window's rows: {first_line(exc)}", model=load.model.model_name,
                            destination=self.name, fix="check that each column's data_type matches the source "
                            "values (a json column must hold valid JSON text)") from None

    def _remove_staging(self, window: StagingTable, load: base.WindowLoad) -> None:
        if self._conn is not None:
            with suppress(Exception):
                self._conn.unregister(window.name)
        shutil.rmtree(self._staging_folder(load.model, window.name), ignore_errors=True)

    def has_table(self, model: ModelConfig) -> bool:
        with self._reading():
            return super().has_table(model)

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """The table read into this process as Arrow (the file closed at once), then handed to
        Spark: fine for millions of rows, not for a table beyond the driver's memory."""
        with self._reading():
            if not self._exists(model.model_name):
                return base.empty_frame(spark, model)
            table = base.typed(self.session.conn.sql(f"SELECT * FROM {self.table(model)}").to_arrow_table(), model)
        return spark.createDataFrame(table) if table.num_rows else base.empty_frame(spark, model)

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        """``Tuning.delete_batch_rows`` rows at a time, each batch registered as Arrow and deleted in
        one transaction (``DELETE ... USING``)."""
        columns = [c.destination_name for c in (*model.primary_key, model.last_modified)]
        schema = pa.schema([base.arrow_schema(model).field(c) for c in columns])
        name, deleted = self.staging_table_name(model, transfer_id), 0
        delete = self.dialect.delete_matching(self.table(model), quote_ident(name), columns)
        for batch in base.frame_batches(frame.select(*columns), schema, self.tuning.delete_batch_rows):
            with self.session.transaction():
                self.session.conn.register(name, batch)  # in place of the batch before
                deleted += self.session.execute(delete)
        return deleted

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        """The folder (made for the probe if missing, then removed) and files in it (DuckDB's write-ahead
        log, the staging files, the locks), then the file, as :meth:`_probe_plan` says."""
        probe, folder, created = Probe(target), self.path.parent, missing_parents(self.path.parent)
        plan = self._probe_plan(models, "")
        steps = [f"write, rename and delete files in {folder}", plan.login, *(step.name for step in plan.steps)]
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            probe.failed(f"create folder {folder}", exc.strerror or str(exc), folder_fix(created[0] if created else folder))
            probe.skipped(steps, "no folder")
            return probe.checks
        try:
            probe.passed(f"create folder {folder}", NEW if created else "it exists")
            if not probe_folder(probe, folder, steps[0]):
                probe.skipped(steps[1:], "the folder is not writable")
            elif not self.path.exists():
                probe.passed(steps[1], NEW)
                probe.skipped(steps[2:], "no file yet")
            else:
                probe.checks.extend(super().probe(models, target))
        finally:
            for made in reversed(created):
                shutil.rmtree(made, ignore_errors=True)
        return probe.checks

    def _probe_plan(self, models: list[ModelConfig], name: str) -> ProbePlan:
        """The file opened read-write (not locked by another process, a DuckDB database), then what a transfer
        does in its schema, in a transaction rolled back (when the file is closed)."""
        import duckdb

        def connect() -> None:
            self._conn = self._open(read_only=False, wait=False)

        table = qualified(self.schema, name)
        return ProbePlan(f"open {self.path} for writing (not locked by another process)", connect,
                         lambda exc: getattr(exc, "fix", ""), [Step(
                             f"create, alter and drop tables in schema {self.schema}", "open the file with the duckdb "
                             "package and check that it is writable (not attached read-only, enough disk)",
                             ["BEGIN TRANSACTION", f"CREATE SCHEMA IF NOT EXISTS {quote_ident(self.schema)}",
                              f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v VARCHAR)",
                              f"INSERT INTO {table} VALUES (1, 'a') ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
                              f"ALTER TABLE {table} ADD COLUMN w BIGINT", f"DROP TABLE {table}"])],
                         duckdb.Error, first_line, login_errors=(ConnectionFailure,), no_login="the file cannot be opened")
