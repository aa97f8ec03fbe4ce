"""Snowflake destination: the SQL writer's algorithm (``destinations/sql/``) with
:class:`~.dialect.SnowflakeDialect`'s statements, loaded the way Snowflake recommends:

- **a window is staged** as Parquet files, ``PUT`` to the schema's named stage ``_tp_stage``
  under a folder of its own (from Spark's Python workers, each over a connection of its own, or
  from this process), then one ``COPY INTO`` a transient staging table (``MATCH_BY_COLUMN_NAME =
  CASE_INSENSITIVE``, ``PURGE = TRUE``: the files leave the stage once loaded);
- **the window's commit** is one ``BEGIN ... COMMIT`` of DML only (Snowflake commits at any DDL):
  the soft deletes, the merge on the key with the last-modified tie-break, the ``_transfer_status``
  row and the renewal of the model's lock; a reader sees the window whole or not at all;
- **the model's lock** is a row of ``_transfer_locks`` (holder, expiry) claimed by one ``UPDATE``
  when free, ours, or expired (``lock_lease_seconds`` after its holder's last sign of life); each
  commit renews it and fails if the lock was taken over, so a transfer presumed dead never
  commits over its successor;
- **a full refresh** is built in a table aside and published, when the live table's columns are
  the model's, as DML in one transaction (the live rows replaced by the aside's, the state
  recorded); otherwise by renames between two commits (the SQL writer's publish without
  transactional DDL: the live table is absent for the moment between two ``ALTER TABLE ...
  RENAME``).

Every table lives in ``connection.database``.``connection.schema`` (the recipient's, created
beforehand); names are quoted as written.
"""

from __future__ import annotations

import tempfile
import uuid
from contextlib import AbstractContextManager, suppress
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import arrow_schema, empty_frame
from transfer_platform.destinations.skeleton import next_state
from transfer_platform.destinations.snowflake.connect import (
    SnowflakeSession,
    connect,
    connect_kwargs,
    first_line,
    translated_errors,
)
from transfer_platform.destinations.snowflake.dialect import LOCK_TABLE, STAGE, SnowflakeDialect
from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable
from transfer_platform.errors import DataError, MissingPrivilege, transfer_running
from transfer_platform.phases import log_phase
from transfer_platform.storage.locks import Lock, Locks
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.snowflake import SnowflakeDestination

if TYPE_CHECKING:
    import pyarrow as pa
    import snowflake.connector
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.destinations.base import WindowLoad
    from transfer_platform.probes import Check

#: how often a transfer waiting for a model's lock asks again
LOCK_POLL_SECONDS = 0.5


def stage_partition(connect_args: dict, put_sql: str, batches) -> object:
    """Runs in a Spark Python worker: its partition's Arrow batches written as one Parquet file,
    uploaded to the window's stage folder over a connection of its own."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import snowflake.connector

    rows, writer = 0, None
    with tempfile.TemporaryDirectory(prefix="tp_sf_") as folder:
        path = Path(folder) / f"part-{uuid.uuid4().hex}.parquet"
        for batch in batches:
            if writer is None:
                writer = pq.ParquetWriter(path, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is not None:
            writer.close()
            try:
                with snowflake.connector.connect(**connect_args) as conn, conn.cursor() as cursor:
                    cursor.execute(put_sql.replace("{path}", str(path)))
            except snowflake.connector.errors.Error as exc:  # the first line only, never the settings
                raise RuntimeError(f"PUT to the stage failed: {first_line(exc)}") from None
    yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))


class LockRow(Lock):
    """A model's lock as its row of ``_transfer_locks``: claimed by one ``UPDATE`` when free, ours,
    or expired (so a dead holder's is taken over by the claim itself); renewed inside each commit."""

    poll_seconds = LOCK_POLL_SECONDS
    then = "a transfer that died is taken over once its lease (lock_lease_seconds) runs out"

    def __init__(self, writer: SnowflakeWriter, model: str) -> None:
        self.writer, self.model = writer, model

    def take(self, within: float) -> bool:
        import snowflake.connector

        w = self.writer
        try:
            return w.session.execute(w.dialect.claim_lock(w.locks, self.model, w.holder, w.lease)) > 0
        except snowflake.connector.errors.ProgrammingError as exc:
            if "conflict" in str(exc).lower():  # two claims at once: the other won
                return False
            raise

    def holder(self) -> str:
        w = self.writer
        row = w.session.one(w.dialect.lock_holder(w.locks, self.model))
        return "it holds the model's lock" + (f", its lease running until {row[1]}" if row and row[1] else "")

    def renew(self) -> None:
        w = self.writer
        if not w.session.execute(w.dialect.renew_lock(w.locks, self.model, w.holder, w.lease)):
            raise transfer_running(
                self.model, w.name, "this transfer's lock expired and was taken over by another transfer; nothing "
                "of this window was committed", "raise lock_lease_seconds above the longest window's load time, "
                "then run the transfer again")

    def release(self) -> None:
        """Every lock row of this writer's (one statement)."""
        self.writer.session.execute(self.writer.dialect.release_lock(self.writer.locks, self.writer.holder))


class SnowflakeWriter(SqlWriter):
    DIALECT = SnowflakeDialect()

    def __init__(self, destination: SnowflakeDestination, tuning: Tuning = DEFAULT) -> None:
        c = destination.connection
        super().__init__(destination, tuning, container=c.schema_,
                         what=f"Snowflake destination '{destination.name}' (schema {c.database}.{c.schema_})")
        self.dialect = SnowflakeDialect(c.database)
        self.stage = self.dialect.qualified(self.container, STAGE)
        self.locks = self.dialect.qualified(self.container, LOCK_TABLE)
        self.lease = destination.lock_lease_seconds
        self.holder = f"{uuid.uuid4().hex}"  # this writer, in the lock rows
        self._conn: snowflake.connector.SnowflakeConnection | None = None
        self._locked = Locks()
        self._open = False  # a window copied straight into its target: its transaction is open

    # -- connection ---------------------------------------------------------------------------

    @property
    def conn(self) -> snowflake.connector.SnowflakeConnection:
        if self._conn is None or self._conn.is_closed():
            self._conn = connect(self.destination, self.what)
            with self._translated_errors():
                self._use_schema()
        return self._conn

    @property
    def session(self) -> SnowflakeSession:
        return SnowflakeSession(self.conn)

    def close(self) -> None:
        """Release the models' locks, then the connection."""
        if self._conn is not None:
            self._locked.release_all()  # gone: the locks expire by themselves
            with suppress(Exception):
                self._conn.close()
            self._conn = None
        self._locked.clear()

    def _translated_errors(self) -> AbstractContextManager[None]:
        return translated_errors(self.destination, self.what)

    # -- bookkeeping: the schema must exist; the status and lock tables and the stage are made --

    def _reach(self) -> None:
        with self._translated_errors():
            for ddl in (self.dialect.status_ddl(self.status_table), self.dialect.lock_ddl(self.locks),
                        self.dialect.stage_ddl(self.stage)):
                self.session.execute(ddl)

    def _use_schema(self) -> None:
        """The session's schema set to the destination's (``COPY INTO`` keeps its load history
        there), once it is known to exist."""
        c = self.destination.connection
        session = SnowflakeSession(self._conn)
        (found,) = session.one(self.dialect.schema_exists(c.schema_))
        if not found:
            raise MissingPrivilege(self.what, role=c.role or c.user,
                                   reason=f"schema {c.schema_!r} of database {c.database!r} does not exist or is "
                                          "not visible to the role",
                                   grant=f'CREATE SCHEMA "{c.database}"."{c.schema_}" (names are case-sensitive '
                                         "as written), then the grants of docs/permissions.md")
        session.execute(f"USE SCHEMA {self.dialect.quote(c.database)}.{self.dialect.quote(c.schema_)}")

    # -- the model's lock: a row with holder and expiry ------------------------------------------

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """One transfer (or sweep) of a model at a time; a second waits up to
        ``Tuning.lock_wait_seconds``, then is refused naming the holder's lease."""
        name = model.model_name
        if name in self._locked:
            return
        with self._translated_errors():
            self.session.execute(self.dialect.lock_ddl(self.locks))
            self.session.execute(self.dialect.ensure_lock_row(self.locks, name))
            self._locked.hold(name, LockRow(self, name), destination=self.name,
                              wait_seconds=self.tuning.lock_wait_seconds)

    def _lock_state(self, model: ModelConfig, column: str) -> ModelState:
        """Inside a commit: the lease renewed, refused if the lock is no longer this writer's."""
        LockRow(self, model.model_name).renew()
        return super()._lock_state(model, column)

    # -- the bulk load: Parquet, PUT, COPY INTO ----------------------------------------------------

    def _folder(self, staging: str) -> str:
        return f"{staging.rsplit('.', 1)[-1].strip(chr(34))}/{uuid.uuid4().hex}"

    def _copy(self, staging: str, folder: str, model: ModelConfig) -> None:
        import snowflake.connector

        with self._translated_errors():
            try:
                self.session.execute(self.dialect.copy_into(staging, self.stage, folder))
            except snowflake.connector.errors.ProgrammingError as exc:
                if exc.errno in (2003, 3001):
                    raise
                raise self._load_error(model, first_line(exc)) from None

    def _load_frame(self, frame: DataFrame, staging: str, model: ModelConfig) -> None:
        """The frame's files PUT to the stage (:meth:`_put_frame`), then one COPY INTO."""
        folder = self._put_frame(frame, staging, model)
        if folder is not None:
            self._copy(staging, folder, model)

    def _put_frame(self, frame: DataFrame, staging: str, model: ModelConfig) -> str | None:
        """Each Spark partition is written as a Parquet file by a Python worker and PUT to the
        stage over its own connection (``mapInArrow``: memory stays flat); the stage folder
        holding them, or ``None`` if the frame had no rows."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        from transfer_platform.runtime.connections import spark_error_reason

        folder = self._folder(staging)
        put = partial(stage_partition, connect_kwargs(self.destination),
                      self.dialect.put("{path}", self.stage, folder))
        try:
            rows = frame.coalesce(self.destination.max_concurrent_queries_per_transfer).mapInArrow(
                put, "rows long").collect()
        except (Py4JJavaError, PySparkException) as exc:
            raise self._load_error(model, spark_error_reason(exc)) from None
        return folder if sum(r[0] for r in rows) else None

    def _load_arrow(self, batch: pa.Table, staging: str, load: WindowLoad) -> None:
        folder = self._put_arrow(batch, staging)
        if folder is not None:
            self._copy(staging, folder, load.model)

    def _put_arrow(self, batch: pa.Table, staging: str) -> str | None:
        import pyarrow.parquet as pq

        if not batch.num_rows:
            return None
        folder = self._folder(staging)
        with tempfile.TemporaryDirectory(prefix="tp_sf_") as tmp:
            path = Path(tmp) / "window.parquet"
            pq.write_table(batch, path)
            with self._translated_errors():
                self.session.execute(self.dialect.put(str(path), self.stage, folder))
        return folder

    # -- the empty-table load: copy into the table itself, in the window's transaction -----------

    def _start_empty_load(self, load: WindowLoad, staging: StagingTable) -> bool:
        """A window into an empty target (a backfill's first into an empty table, a full
        refresh's first into its table aside) is loaded by ``COPY INTO`` the target itself,
        inside the window's one transaction: each row written once, no merge, the table kept
        (its grants, comments and streams with it); a reader sees it empty until the commit. A
        model with a JSON column is staged and merged (its values are parsed there). Any other
        window is staged and merged."""
        return not any(c.data_type == "json" for c in load.model.columns)

    def _stage_frame(self, frame: DataFrame, staging: StagingTable, load: WindowLoad) -> StagingTable:
        if not staging.into_empty:
            return super()._stage_frame(frame, staging, load)
        copied = self._copied_straight(staging, self._put_frame(frame, staging.table, load.model), load)
        return copied or super()._stage_frame(frame, staging, load)

    def _stage_arrow(self, batch: pa.Table, staging: StagingTable, load: WindowLoad) -> StagingTable:
        if not staging.into_empty:
            return super()._stage_arrow(batch, staging, load)
        copied = self._copied_straight(staging, self._put_arrow(batch, staging.table), load)
        return copied or super()._stage_arrow(batch, staging, load)

    def _copied_straight(self, staging: StagingTable, folder: str | None,
                         load: WindowLoad) -> StagingTable | None:
        """The window's transaction begun and its files copied into the target, which is then
        what the scan and the commit read; ``None`` (rolled back, the window to be staged again
        into a staging table, created here) if the target got rows meanwhile or the copy failed:
        the staged path names the offending row (a key twice or a NULL key that the target's
        definition refuses) or the value that does not fit."""
        from snowflake.connector import errors

        reason = None
        with self._translated_errors():
            self.session.execute("BEGIN")
            self._open = True
            if self._has_rows(staging.target):
                reason = "the table got rows while the window was staged"
            elif folder is not None:
                try:
                    self.session.execute(self.dialect.copy_into(staging.target, self.stage, folder))
                except (errors.ProgrammingError, errors.IntegrityError, errors.DataError) as exc:
                    if exc.errno in (2003, 3001):  # a missing object or privilege: said as such
                        raise
                    reason = first_line(exc)  # a value the table refuses (a NULL key: NOT NULL)
            if reason is None:
                return self._staged(replace(staging, name=staging.target_name, table=staging.target), load)
            self._rollback()
            staging.into_empty = False
            self._create_staging_table(staging, load.model, None, logged=False)
        log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=load.model.model_name,
                  staging_table=staging.name, straight_into_target=False, staged_again=True, reason=reason)
        return None

    def _publish_empty_load(self, staging: StagingTable, load: WindowLoad) -> ModelState:
        """A window copied straight into its target commits what its transaction holds: the rows
        (those marked deleted already left out), the lease renewed, the new state recorded."""
        try:
            before = self._lock_state(load.model, "refresh_state" if load.into_refresh else "state")
            new_state = next_state(before, load, staging.max_last_modified)
            self._write_state(load, new_state)
            self.session.execute("COMMIT")
            self._open = False
        finally:
            self._rollback()
        return new_state

    def _remove_staging(self, staging: StagingTable, load: WindowLoad) -> None:
        self._rollback()  # a straight window that failed: nothing of it stays
        if staging.into_empty:
            return
        super()._remove_staging(staging, load)

    def _rollback(self) -> None:
        if self._open:
            self._open = False
            with suppress(Exception):  # the connection may be gone: its transaction with it
                self.session.execute("ROLLBACK")

    def _load_error(self, model: ModelConfig, reason: str) -> DataError:
        return DataError(f"loading the window into Snowflake failed: {reason}", model=model.model_name,
                         destination=self.name, fix="check that each column's data_type matches the source values")

    # -- the catalog: SHOW PRIMARY KEYS names the column in its fifth field ------------------------

    def _primary_key(self, name: str) -> list[str]:
        if not self._exists(name):
            return []
        return sorted(row[4] for row in self.session.all(self.dialect.primary_key(self.container, name)))

    # -- a full refresh's publish ---------------------------------------------------------------------

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        """The live table's rows replaced by the aside's in one transaction with the state (the
        live table's columns are the model's); otherwise the renames between two commits."""
        if not (self._exists(model.model_name) and self._columns_match(model, model.model_name)):
            super()._replace_live(model, state, transfer_id)
            return
        with self.session.transaction():
            self._lock_state(model, "refresh_state")
            for statement in self.dialect.replace_rows(self.table(model), self.refresh_table(model), model):
                self.session.execute(statement)
            self._record_state(model, state, transfer_id)
            self._set_state(model, "refresh_state", None)
        self.session.execute(self.dialect.drop_table(self.refresh_table(model)))

    # -- outside a transfer's windows ---------------------------------------------------------------

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """The table read into this process through the connector, then handed to Spark (fine for
        millions of rows, not for a table beyond the driver's memory)."""
        import pyarrow as pa

        with self._translated_errors():
            if not self._exists(model.model_name):
                return empty_frame(spark, model)
            schema = arrow_schema(model)
            names = ", ".join(self.dialect.quote(n) for n in schema.names)
            rows = self.session.all(f"SELECT {names} FROM {self.table(model)}")
        json_columns = {c.destination_name for c in model.columns if c.data_type == "json"}
        data = {n: [r[i] for r in rows] for i, n in enumerate(schema.names)}
        for name in json_columns:
            data[name] = [None if v is None else str(v) for v in data[name]]
        table = pa.table(data, schema=schema)
        return spark.createDataFrame(table) if table.num_rows else empty_frame(spark, model)

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        from transfer_platform.destinations.snowflake.probe import probe_destination

        return probe_destination(self, target)
