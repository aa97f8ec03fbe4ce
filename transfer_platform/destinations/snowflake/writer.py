"""The Snowflake destination: the SQL writer with :class:`~.dialect.SnowflakeDialect`, its windows'
Parquet files ``PUT`` to the stage ``_tp_stage``, then ``COPY INTO`` a staging table (or an empty table
itself). Snowflake commits at any DDL: a commit is one ``BEGIN ... COMMIT`` of DML that renews the
model's lock, a row of ``_transfer_locks`` whose lease a dead transfer's successor takes over."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, suppress
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
from snowflake import connector

from transfer_platform import errors
from transfer_platform.config.models import ModelConfig
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.skeleton import next_state
from transfer_platform.destinations.snowflake import connect as sf
from transfer_platform.destinations.snowflake.dialect import STAGE, SnowflakeDialect
from transfer_platform.destinations.sql.dialect import LOCKS_TABLE
from transfer_platform.destinations.sql.session import SnowflakeSession
from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable
from transfer_platform.phases import log_phase
from transfer_platform.probes import ProbePlan, Step
from transfer_platform.runtime.connections import spark_error_reason
from transfer_platform.storage.locks import Lock
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.snowflake import SnowflakeDestination

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from transfer_platform.destinations.base import WindowLoad


def put_parquet(batches: Iterable[pa.RecordBatch], put: Callable[[str], object]) -> int:
    """The batches' rows written as one Parquet file whose path is handed to ``put``; how many."""
    rows, writer = 0, None
    with tempfile.TemporaryDirectory(prefix="tp_sf_") as folder:
        path = Path(folder) / f"part-{uuid.uuid4().hex}.parquet"
        for batch in (b for b in batches if b.num_rows):
            if writer is None:
                writer = pq.ParquetWriter(path, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is not None:
            writer.close()
            put(str(path))
    return rows


def stage_partition(connect_args: dict, put_sql: str, batches) -> object:
    """In a Spark Python worker: its partition PUT to the window's stage folder over a connection of its own."""
    def put(path: str) -> None:
        try:
            with connector.connect(**connect_args) as conn, conn.cursor() as cursor:
                cursor.execute(put_sql.replace("{path}", path))
        except connector.Error as exc:  # the first line only, never the settings
            raise RuntimeError(f"PUT to the stage failed: {sf.first_line(exc)}") from None

    yield pa.RecordBatch.from_pydict({"rows": [put_parquet(batches, put)]}, schema=pa.schema([("rows", pa.int64())]))


class LockRow(Lock):
    """A model's row of ``_transfer_locks``, claimed by one ``UPDATE`` when free, ours or expired
    (so a dead holder's is taken over by the claim itself); renewed in each commit."""

    poll_seconds = 0.5
    then = "a transfer that died is taken over once its lease (lock_lease_seconds) runs out"

    def __init__(self, writer: SnowflakeWriter, model: str) -> None:
        self.writer, self.model = writer, model

    def take(self, within: float) -> bool:
        w = self.writer
        try:
            return w.session.execute(w.dialect.claim_lock(w.locks, self.model, w.holder, w.lease)) > 0
        except connector.ProgrammingError as exc:
            if "conflict" in str(exc).lower():  # two claims at once: the other won
                return False
            raise

    def holder(self) -> str:
        row = self.writer.session.one(self.writer.dialect.lock_holder(self.writer.locks, self.model))
        return "it holds the model's lock" + (f", its lease running until {row[1]}" if row and row[1] else "")

    def renew(self) -> None:
        w = self.writer
        if not w.session.execute(w.dialect.renew_lock(w.locks, self.model, w.holder, w.lease)):
            raise errors.transfer_running(
                self.model, w.name, "this transfer's lock expired and was taken over by another transfer; nothing "
                "of this window was committed", "raise lock_lease_seconds above the longest window's load time, "
                "then run the transfer again")

    def release(self) -> None:  # every lock row of this writer's
        self.writer.session.execute(self.writer.dialect.release_lock(self.writer.locks, self.writer.holder))


class SnowflakeWriter(SqlWriter):
    DIALECT = SnowflakeDialect()

    def __init__(self, destination: SnowflakeDestination, tuning: Tuning = DEFAULT) -> None:
        c = destination.connection
        super().__init__(destination, tuning, container=c.schema_,
                         what=f"Snowflake destination '{destination.name}' (schema {c.database}.{c.schema_})")
        self.dialect = SnowflakeDialect(c.database)
        self.stage, self.locks = (self.dialect.qualified(self.container, name) for name in (STAGE, LOCKS_TABLE))
        self.holder, self.lease = uuid.uuid4().hex, destination.lock_lease_seconds  # this writer in the lock rows

    @property
    def conn(self) -> connector.SnowflakeConnection:
        if self._conn is None or self._conn.is_closed():
            self._conn = sf.connect(self.destination, self.what)
            with self._translated_errors():
                self._use_schema()
        return self._conn

    @property
    def session(self) -> SnowflakeSession:
        return SnowflakeSession(self.conn)

    def _translated_errors(self) -> AbstractContextManager[None]:
        return sf.translated_errors(self.destination, self.what)

    def _use_schema(self) -> None:
        """The session's schema: the destination's, which must exist (``COPY INTO`` keeps its load history there)."""
        c, session = self.destination.connection, SnowflakeSession(self._conn)
        (found,) = session.one(self.dialect.schema_exists(c.schema_))
        if not found:
            raise errors.MissingPrivilege(
                self.what, role=c.role or c.user, reason=f"schema {c.schema_!r} of database {c.database!r} does not "
                "exist or is not visible to the role", grant=f'CREATE SCHEMA "{c.database}"."{c.schema_}" (names are '
                "case-sensitive as written), then the grants of docs/permissions.md")
        session.execute(f"USE SCHEMA {self.dialect.quote(c.database)}.{self.dialect.quote(c.schema_)}")

    def _create_container(self) -> None:  # beside _transfer_status: the stage (the lock table: lock_model)
        self.session.execute(self.dialect.stage_ddl(self.stage))

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        with self._translated_errors():
            self.session.execute(self.dialect.lock_ddl(self.locks))
            self.session.execute(self.dialect.ensure_status_row(self.locks, model.model_name))
            self._locked.hold(model.model_name, LockRow(self, model.model_name), destination=self.name,
                              wait_seconds=self.tuning.lock_wait_seconds)

    def _lock_state(self, model: ModelConfig, column: str) -> ModelState:
        """Inside a commit: the lease renewed, refused if the lock is no longer this writer's."""
        LockRow(self, model.model_name).renew()
        return super()._lock_state(model, column)

    def _put_frame(self, frame: DataFrame, model: ModelConfig) -> str | None:
        """Each partition PUT by a Spark Python worker (``mapInArrow``: memory stays flat); the folder, if any rows."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        folder = uuid.uuid4().hex
        put = partial(stage_partition, sf.connect_kwargs(self.destination), self.dialect.put("{path}", self.stage,
                                                                                             folder))
        try:
            rows = frame.coalesce(self.destination.max_concurrent_queries_per_transfer).mapInArrow(
                put, "rows long").collect()
        except (Py4JJavaError, PySparkException) as exc:
            raise self._load_error(model, spark_error_reason(exc)) from None
        return folder if sum(r[0] for r in rows) else None

    def _put_arrow(self, batch: pa.Table) -> str | None:
        folder = uuid.uuid4().hex
        with self._translated_errors():
            rows = put_parquet(batch.to_batches(), lambda path: self.session.execute(
                self.dialect.put(path, self.stage, folder)))
        return folder if rows else None

    def _copy(self, table: str, folder: str | None, model: ModelConfig | None = None) -> str | None:
        """The folder's files copied into ``table``; a value it refuses: the reason, or, ``model``
        given, its ``DataError`` (a missing object or privilege is raised as such)."""
        with self._translated_errors():
            try:
                if folder is not None:
                    self.session.execute(self.dialect.copy_into(table, self.stage, folder))
            except (connector.ProgrammingError, connector.IntegrityError, connector.DataError) as exc:
                if exc.errno in (sf.NOT_FOUND, sf.NOT_ALLOWED):
                    raise
                if model is None:
                    return sf.first_line(exc)
                raise self._load_error(model, sf.first_line(exc)) from None
        return None

    def _load_frame(self, frame: DataFrame, staging: str, model: ModelConfig) -> None:
        self._copy(staging, self._put_frame(frame, model), model)

    def _load_error(self, model: ModelConfig, reason: str) -> errors.DataError:
        return errors.DataError(f"loading the window into Snowflake failed: {reason}", model=model.model_name,
                                destination=self.name, fix="check that each column's data_type matches the source values")

    def _start_empty_load(self, load: WindowLoad, staging: StagingTable) -> bool:
        """Each row written once, the table kept (its grants, comments and streams), empty to readers
        until the commit; a model with a JSON column is staged and merged (its values parsed there)."""
        return not any(c.data_type == "json" for c in load.model.columns)

    def _stage_frame(self, frame: DataFrame, staging: StagingTable, load: WindowLoad) -> StagingTable:
        return self._stage(staging, load, self._put_frame(frame, load.model))

    def _stage_arrow(self, batch: pa.Table, staging: StagingTable, load: WindowLoad) -> StagingTable:
        return self._stage(staging, load, self._put_arrow(batch))

    def _stage(self, staging: StagingTable, load: WindowLoad, folder: str | None) -> StagingTable:
        """The folder copied into the staging table; or into the empty table itself, in the window's
        transaction begun here, unless the table got rows or refused a value (a NULL key: NOT NULL):
        that rolled back, the window is staged, where the scan names the offending row."""
        if staging.into_empty:
            with self._translated_errors():
                self.session.execute("BEGIN")
                reason = ("the table got rows while the window was staged" if self._has_rows(staging.target)
                          else self._copy(staging.target, folder))
                if reason is None:
                    return self._staged(replace(staging, name=staging.target_name, table=staging.target), load)
                self.session.execute("ROLLBACK")
            staging.into_empty = False
            self._create_staging_table(staging, load.model, None, logged=False)
            log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=load.model.model_name,
                      staging_table=staging.name, straight_into_target=False, staged_again=True, reason=reason)
        self._copy(staging.table, folder, load.model)
        return self._staged(staging, load)

    def _publish_empty_load(self, staging: StagingTable, load: WindowLoad) -> ModelState:
        """The window's transaction committed with the lease renewed and the new state."""
        before = self._lock_state(load.model, "refresh_state" if load.into_refresh else "state")
        new_state = next_state(before, load, staging.max_last_modified)
        self._write_state(load, new_state)
        self.session.execute("COMMIT")
        return new_state

    def _remove_staging(self, staging: StagingTable, load: WindowLoad) -> None:
        if not staging.into_empty:
            return super()._remove_staging(staging, load)
        with suppress(Exception):  # a straight window that failed: nothing of it stays (committed: a no-op)
            self.session.execute("ROLLBACK")

    def _primary_key(self, name: str, model: ModelConfig) -> list[str]:  # asked only of a table that exists
        return sorted(row[4] for row in self.session.all(self.dialect.primary_key(self.container, name)))

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        """Where the live table's columns are the model's, its rows replaced in one transaction with the state."""
        if not self._columns_match(model, model.model_name):
            return super()._replace_live(model, state, transfer_id)
        with self.session.transaction():
            self._lock_state(model, "refresh_state")
            for statement in self.dialect.replace_rows(self.table(model), self.refresh_table(model), model):
                self.session.execute(statement)
            self._record_state(model, state, transfer_id)
            self._set_state(model, "refresh_state", None)
        self.session.execute(self.dialect.drop_table(self.refresh_table(model)))

    def _probe_plan(self, models: list[ModelConfig], name: str) -> ProbePlan:
        """Log in, find the schema, then each step of a transfer (and the grant it needs) on probe tables."""
        c, d, stage = self.destination.connection, self.dialect, self.stage
        table, staging, loaded = (d.qualified(c.schema_, name + suffix) for suffix in ("", "_s", "_l"))
        role, warehouse, database = d.quote(c.role or "<the user's role>"), d.quote(c.warehouse), d.quote(c.database)
        schema, parquet = f"{database}.{d.quote(c.schema_)}", Path(tempfile.gettempdir()) / f"{name}.parquet"

        def connect() -> None:
            self._conn = sf.connect(self.destination, self.what)

        def reason(exc: Exception) -> str:  # a missing schema's, in the parentheses of its message
            return str(exc).split(" (", 1)[-1].split(")")[0] if isinstance(exc, errors.MissingPrivilege) else \
                sf.first_line(exc)

        steps = [
            Step(f"find schema {c.database}.{c.schema_}", lambda exc: getattr(exc, "grant", ""), [self._use_schema],
                 skips="the schema is not there"),
            Step("use the warehouse (run queries)", f"GRANT USAGE ON WAREHOUSE {warehouse} TO ROLE {role}",
                 [f"USE WAREHOUSE {warehouse}", "SELECT 1"]),
            Step("create tables (model, status, lock and staging tables)",
                 f"GRANT USAGE ON DATABASE {database} TO ROLE {role}; GRANT USAGE, CREATE TABLE ON SCHEMA {schema} TO "
                 f"ROLE {role}", [f"CREATE TABLE {table} (id NUMBER(38,0), v VARCHAR, PRIMARY KEY (id))",
                                  f"CREATE TRANSIENT TABLE {staging} (id NUMBER(38,0), v VARCHAR)"]),
            Step("create the stage _tp_stage", f"GRANT CREATE STAGE ON SCHEMA {schema} TO ROLE {role}",
                 [d.stage_ddl(stage)]),
            Step("insert, read, update and delete rows (merge, state)", "the role owns the tables it creates: check "
                 "that no future grant or managed access removes its ownership",
                 [f"INSERT INTO {staging} (id, v) VALUES (1, 'a')",
                  f"INSERT INTO {table} (id, v) SELECT id, v FROM {staging}",
                  f"UPDATE {table} AS t SET v = s.v FROM {staging} AS s WHERE t.id = s.id",
                  f"DELETE FROM {table} AS t USING {staging} AS s WHERE t.id = s.id"]),
            Step("add and drop columns (schema evolution)", "the role must own the model's tables",
                 [f"ALTER TABLE {table} ADD COLUMN w VARCHAR", f"ALTER TABLE {table} DROP COLUMN w"]),
            Step("drop tables (staging, full refresh)", "the role must own the tables",
                 [d.drop_table(staging, if_exists=False)]),
            Step("stage a Parquet file (PUT) and load it (COPY INTO)", f"GRANT READ, WRITE ON STAGE {stage} TO ROLE "
                 f"{d.quote(c.role or '<the user role>')} (if another role created the stage)",
                 [lambda: pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), parquet),
                  f"CREATE TRANSIENT TABLE {loaded} (id NUMBER(38,0))", d.put(str(parquet), stage, name),
                  d.copy_into(loaded, stage, name)]),
        ]
        return ProbePlan(f"log in to account {c.account!r} as {c.user!r}", connect,
                         "check account, host, user and the password's (or private_key's) environment variable",
                         steps, (connector.Error, errors.MissingPrivilege), reason,
                         cleanup=[lambda: parquet.unlink(missing_ok=True), *map(d.drop_table, (table, staging, loaded))])
