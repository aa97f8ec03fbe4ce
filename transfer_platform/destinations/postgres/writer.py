"""PostgreSQL destination: the SQL writer's algorithm (``destinations/sql/``) with
:class:`~.dialect.PostgresDialect`'s statements, and what PostgreSQL does its own way:

- **the bulk load**: ``COPY ... FROM STDIN`` into an UNLOGGED staging table, from Spark's Python
  workers or from this process (:mod:`.copy`);
- **the model's lock**: a session advisory lock (released when the connection closes or its process
  dies);
- **the empty-table load, a swap** (``empty_table_load="swap"``): when the target is empty and
  nothing depends on it, the loaded staging table *becomes* it (its primary key built, the empty
  target dropped, the staging table renamed): every row is written once;
- **a full refresh's publish**, in one transaction: when nothing depends on the live table's
  identity (no view, foreign key, trigger, extra index, policy, publication, comment, grant or owner
  of its own; the aside table's columns and key exactly the live table's), the aside table is
  analyzed, both tables are locked (waiting at most ``Tuning.lock_wait_seconds`` for the live
  table's readers, else refused with nothing changed), the live table dropped and the aside table
  and its key renamed into its place. When something depends on it, the live table is truncated
  and refilled (merged into, when another table's foreign key references it), its identity kept.
  When its columns no longer match the model, it is replaced (refused, naming the fix, if a view
  depends on it). Readers see the old table whole until that commit;
- **errors**: a refused statement becomes ``MissingPrivilege`` with the grant a loader needs, a lost
  connection ``ConnectionFailure``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from functools import partial
from typing import TYPE_CHECKING

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.routes import Rows
from transfer_platform.core.sql import qualified, quote_ident
from transfer_platform.destinations.postgres import dialect as sql
from transfer_platform.destinations.postgres.copy import copy_batches, copy_partition
from transfer_platform.destinations.postgres.probe import probe_destination
from transfer_platform.destinations.skeleton import next_state
from transfer_platform.destinations.sql.session import PsycopgSession
from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable
from transfer_platform.errors import (
    ConnectionFailure,
    DataError,
    MissingPrivilege,
    SchemaMismatch,
    first_line,
    transfer_running,
)
from transfer_platform.runtime.connections import (
    connect_postgres,
    jdbc_properties,
    postgres_connect_kwargs,
    postgres_jdbc_url,
    spark_error_reason,
)
from transfer_platform.sources.relay import relay_partition
from transfer_platform.storage.locks import AdvisoryLock, Locks
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.postgres import PostgresDestination

if TYPE_CHECKING:
    import psycopg
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.core.watermarks import ModelState
    from transfer_platform.destinations.base import WindowLoad, WindowResult
    from transfer_platform.probes import Check
    from transfer_platform.sources.relay import RelayRead




class PostgresWriter(SqlWriter):
    DIALECT = sql.PostgresDialect()
    accepts = frozenset({Rows.SPARK, Rows.ARROW, Rows.COPY_STREAM})  # a PostgreSQL source's relay

    def __init__(self, destination: PostgresDestination, tuning: Tuning = DEFAULT) -> None:
        super().__init__(destination, tuning, container=destination.connection.schema_ or "public",
                         what=f"PostgreSQL destination '{destination.name}'")
        self.schema = self.container
        self._conn: psycopg.Connection | None = None
        self._locked = Locks()  # the models whose lock this writer's session holds

    # -- connection ---------------------------------------------------------------------------

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect_postgres(self.destination.connection, what=self.what, autocommit=True)
        return self._conn

    @property
    def session(self) -> PsycopgSession:
        return PsycopgSession(self.conn)

    def close(self) -> None:
        """Release the connection, and with it the models' locks (session advisory locks)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._locked.clear()

    def check(self) -> None:
        self.conn.execute("SELECT 1")

    # -- errors ---------------------------------------------------------------------------------

    @contextmanager
    def _missing_privileges(self) -> Iterator[None]:
        """A refused statement becomes ``MissingPrivilege`` with the grant a loader needs."""
        import psycopg

        try:
            yield
        except psycopg.errors.InsufficientPrivilege as exc:
            connection = self.destination.connection
            schema, role = quote_ident(self.schema), quote_ident(connection.username)
            raise MissingPrivilege(
                self.what, role=connection.username, reason=first_line(exc),
                grant=f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {role} (the loader creates, alters, "
                      "drops and renames its tables there; tables created by another role must be "
                      f"owned by it: ALTER TABLE ... OWNER TO {role})",
            ) from None

    @contextmanager
    def _translated_errors(self) -> Iterator[None]:
        """:meth:`_missing_privileges`, and a lost connection as ``ConnectionFailure``."""
        import psycopg

        with self._missing_privileges():
            try:
                yield
            except psycopg.OperationalError as exc:
                connection = self.destination.connection
                raise ConnectionFailure(self.what, host=connection.host, port=connection.port,
                                        reason=first_line(exc)) from None

    def _preparing(self) -> AbstractContextManager[None]:
        return self._missing_privileges()

    # -- bookkeeping ----------------------------------------------------------------------------

    def _create_container(self) -> None:
        """Create the schema only when it is missing: PostgreSQL checks ``CREATE SCHEMA IF NOT
        EXISTS`` against the database's ``CREATE`` privilege even when the schema exists, which a
        loader that only has ``USAGE, CREATE`` on its own schema does not hold."""
        import psycopg

        if self.conn.execute(sql.SCHEMA_EXISTS, (self.schema,)).fetchone()[0]:
            return
        try:
            self.conn.execute(sql.create_schema(self.schema))
        except (psycopg.errors.DuplicateSchema, psycopg.errors.UniqueViolation):
            pass  # another transfer created it meanwhile (a race shows as either)
        except psycopg.errors.InsufficientPrivilege as exc:
            connection = self.destination.connection
            raise MissingPrivilege(
                f"{self.what}: schema {self.schema!r} does not exist and cannot be created",
                role=connection.username, reason=first_line(exc),
                grant=(f"create it for the loader (CREATE SCHEMA {quote_ident(self.schema)} AUTHORIZATION "
                       f"{quote_ident(connection.username)}), or GRANT CREATE ON DATABASE "
                       f"{quote_ident(connection.database)} TO {quote_ident(connection.username)}"),
            ) from None

    def _reach(self) -> None:
        """The schema and ``_transfer_status`` (with its ``refresh_state``), created if missing;
        two transfers starting on a new destination at once may both create the status table, and
        PostgreSQL then refuses the second with a duplicate type or key: the table is there."""
        import psycopg

        with self._translated_errors():
            self._create_container()
            with suppress(psycopg.errors.DuplicateObject, psycopg.errors.DuplicateTable,
                          psycopg.errors.UniqueViolation):
                self.conn.execute(self.dialect.status_ddl(self.status_table))
            if "refresh_state" not in self._columns(sql.STATUS_TABLE):  # a table from an older version
                self.conn.execute(sql.add_refresh_state_column(self.status_table))

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """``committed_state`` reads in one READ ONLY transaction, without row locks."""
        with self._translated_errors(), self.conn.transaction():
            self.conn.execute("SET TRANSACTION READ ONLY")
            yield

    def _status_row(self, model: ModelConfig) -> tuple | None:
        if "refresh_state" in self._columns(sql.STATUS_TABLE):
            return super()._status_row(model)
        row = self.conn.execute(f"SELECT state::text FROM {self.status_table} WHERE data_model_name = %s",
                                (model.model_name,)).fetchone()  # a table from an older version
        return None if row is None else (row[0], None, None)

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """Hold the model's lock in the destination itself (a session advisory lock, released when
        the writer's connection closes, or when its process dies): two transfers of one model to
        one destination never interleave, however they were started, and the staging tables of
        the model left behind can only be a dead transfer's. A second transfer waits up to
        ``Tuning.lock_wait_seconds``, then is refused, naming the first."""
        key = sql.model_lock_key(self.destination.connection.database, self.schema, model.model_name)
        self._locked.hold(model.model_name, AdvisoryLock(self.conn, key, transfer_id), destination=self.name,
                          wait_seconds=self.tuning.lock_wait_seconds)

    # -- the bulk load: COPY ----------------------------------------------------------------------

    def _load_frame(self, frame: DataFrame, staging: str, model: ModelConfig) -> None:
        """Spark hands each partition to a Python worker as Arrow batches (``mapInArrow``, so
        memory stays flat), which writes them as CSV into one ``COPY ... FROM STDIN`` in its own
        transaction. A failed partition commits nothing; at most
        ``max_concurrent_queries_per_transfer`` partitions write at once."""
        connection = self.destination.connection
        copy = partial(copy_partition, postgres_connect_kwargs(connection, what=f"destinations.{self.name}"),
                       sql.copy_csv(staging, frame.columns))
        with self._refused_connections():
            frame.coalesce(self.destination.max_concurrent_queries_per_transfer).mapInArrow(copy, "rows long").collect()

    @contextmanager
    def _refused_connections(self) -> Iterator[None]:
        """Around a Spark job whose tasks write into the destination: a connection its tasks
        could not open becomes ``ConnectionFailure`` (anything else is raised as it is)."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        try:
            yield
        except (Py4JJavaError, PySparkException) as exc:
            reason = spark_error_reason(exc)
            if "Connection" in reason and "refused" in reason:
                connection = self.destination.connection
                raise ConnectionFailure(self.what, host=connection.host, port=connection.port,
                                        reason=reason) from None
            raise

    def write_relayed(self, relay: RelayRead, spark: SparkSession, load: WindowLoad) -> WindowResult:
        """:meth:`write_window` for a window relayed from a PostgreSQL source
        (:mod:`transfer_platform.sources.relay`): staged by binary ``COPY`` streamed from the
        source by Spark's tasks, then scanned, refused and committed as any window."""
        return self._write(load, lambda staging: self._stage_relayed(relay, spark, staging, load), in_memory=False)

    def _stage_relayed(self, relay: RelayRead, spark: SparkSession, staging: StagingTable,
                       load: WindowLoad) -> StagingTable:
        """The window's slices (the source's ``max_concurrent_queries_per_transfer``) spread over
        at most the destination's ``max_concurrent_queries_per_transfer`` Spark tasks, each slice
        in its own transaction; each value cast on the source to the staging column's type."""

        with self._translated_errors():
            types = dict(self.conn.execute(sql.COLUMN_TYPES, (staging.table,)).fetchall())
        names = [dest for _, dest in relay.columns]
        connection = self.destination.connection
        relay_task = partial(relay_partition, relay,
                             postgres_connect_kwargs(connection, what=f"destinations.{self.name}"),
                             staging.table, sql.copy_binary(staging.table, names), {n: types[n] for n in names})
        slices = relay.slices
        tasks = min(slices, self.destination.max_concurrent_queries_per_transfer)
        with self._refused_connections():
            spark.range(slices, numPartitions=tasks).mapInArrow(relay_task, "rows long").collect()
        return self._staged(staging, load)

    def write_streamed(self, stream: Callable[[dict[str, str]], Iterable[bytes]], load: WindowLoad) -> WindowResult:
        """:meth:`write_arrow` for a small window streamed from a PostgreSQL source in binary COPY
        format in this process (``stream(types)``: its chunks, each value cast to ``types``, the
        staging table's column types; :meth:`DirectReads.copy_out
        <transfer_platform.sources.direct.DirectReads.copy_out>`), each chunk written as it comes;
        then scanned, refused and committed as any window, but for the duplicate-key check: the
        stream is one read of a source table holding each key once (its unique index)."""
        return self._write(load, lambda staging: self._stage_streamed(stream, staging, load), in_memory=True)

    def _stage_streamed(self, stream: Callable[[dict[str, str]], Iterable[bytes]], staging: StagingTable,
                        load: WindowLoad) -> StagingTable:
        names = [c.destination_name for c in load.model.columns]
        with self._translated_errors(), self._refused_values(load):
            types = dict(self.conn.execute(sql.COLUMN_TYPES, (staging.table,)).fetchall())
            with self.conn.cursor().copy(sql.copy_binary(staging.table, names)) as into:
                for chunk in stream({n: types[n] for n in names}):
                    into.write(chunk)
        # one read of a source whose unique index holds each key once (the only source streamed),
        # each key value cast to a type that keeps it distinct: no key twice to look for
        staging.duplicates_refused = True
        return self._staged(staging, load)

    def _load_arrow(self, batch: pa.Table, staging: str, load: WindowLoad) -> None:
        with self._translated_errors(), self._refused_values(load):
            copy_batches(self.conn, sql.copy_csv(staging, batch.column_names), batch.to_batches())

    @contextmanager
    def _refused_values(self, load: WindowLoad) -> Iterator[None]:
        """Around a ``COPY`` into the staging table: a value a column cannot hold, named."""
        import psycopg

        try:
            yield
        except (psycopg.DataError, psycopg.IntegrityError) as exc:
            raise DataError(f"COPY into the staging table failed: {first_line(exc)}",
                            model=load.model.model_name, destination=self.name,
                            fix="check that each column's data_type matches the source values") from None

    # -- the empty-table load: swap (the loaded staging table becomes the table) -----------------

    def _start_empty_load(self, load: WindowLoad, staging: StagingTable) -> bool:
        """The staging table logged, so that it can become the table; the swap fits when nothing
        depends on the table (:meth:`_replaceable`)."""
        self._create_staging_table(staging, load.model, None, logged=True)
        return self._replaceable(staging.target, staging.table)

    def _publish_empty_load(self, staging: StagingTable, load: WindowLoad) -> ModelState | None:
        """In one transaction: the status row locked, the staging table swapped in
        (:meth:`_swap_in`), the new state recorded."""
        with self._atomically(load):
            before = self._lock_state(load.model, "refresh_state" if load.into_refresh else "state")
            if not self._swap_in(load, staging):
                return None
            new_state = next_state(before, load, staging.max_last_modified)
            self._write_state(load, new_state)
        return new_state

    def _is_empty(self, table: str) -> bool:
        return self.conn.execute(sql.is_empty(table)).fetchone()[0]

    def _replaceable(self, target: str, staging: str) -> bool:
        """Nothing would be lost by replacing ``target`` with ``staging`` (the empty-target fast
        path, a full refresh's publish): no index but the primary key, no trigger, view, foreign
        key, check, default, policy, publication, rule or comment on it, nothing using its row
        type; the same owner, grants, storage options, persistence, replica identity and row
        security as ``staging``; the same columns in the same order (type, collation, NOT NULL,
        column grants, statistics settings)."""
        (extra,) = self.conn.execute(sql.DEPENDENTS_BUT_THE_KEY, {"t": target}).fetchone()
        if extra:
            return False
        (alike,) = self.conn.execute(sql.SAME_OWNER_GRANTS_AND_OPTIONS, (target, staging)).fetchone()
        return bool(alike) and bool(self.conn.execute(sql.SAME_COLUMNS, (target, staging)).fetchone()[0])

    def _swap_in(self, load: WindowLoad, staging: StagingTable) -> bool:
        """Make the loaded staging table the target, in the current transaction: its primary key
        is built (a duplicate key is refused by name), the empty target dropped, the staging table
        renamed. False, with nothing changed, if the target is no longer empty or cannot be
        dropped (an object came to depend on it): the caller merges instead."""
        import psycopg

        conn = self.conn
        conn.execute(sql.lock_exclusive(staging.target))
        if not self._is_empty(staging.target):
            return False
        try:
            with conn.transaction():
                conn.execute(sql.add_primary_key(staging.table, [c.destination_name for c in load.model.primary_key]))
        except psycopg.errors.UniqueViolation:
            self._refuse_duplicate_keys(load, staging)
            raise  # not reached: the check above names the duplicate
        try:
            with conn.transaction():
                conn.execute(self.dialect.drop_table(staging.target, if_exists=False))
        except psycopg.errors.DependentObjectsStillExist:
            return False
        self._rename_into(staging.table, staging.target_name)
        return True

    def _rename_into(self, table: str, name: str) -> None:
        """Rename ``table`` (in this schema) to ``name``, its primary key to ``<name>_pkey``."""
        target = qualified(self.schema, name)
        for statement in self.dialect.rename_tables(self.schema, [(table, name)]):
            self.conn.execute(statement)
        (pkey,) = self.conn.execute(sql.PRIMARY_KEY_NAME, (target,)).fetchone()
        self.conn.execute(sql.rename_constraint(target, pkey, name + "_pkey"))

    # -- a full refresh's publish -----------------------------------------------------------------

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        live, aside = self.table(model), self.refresh_table(model)
        if not self._columns_match(model, model.model_name):  # a new shape, or no live table yet
            self._replace_live_table(model)
        elif not (self._swappable(live, aside) and self._swap_refresh(model)):
            self._refill_live_table(model)
        self._record_state(model, state, transfer_id)
        self._set_state(model, "refresh_state", None)

    def _swappable(self, live: str, aside: str) -> bool:
        return self._replaceable(live, aside) and bool(self.conn.execute(sql.SAME_PRIMARY_KEY, (live, aside)).fetchone()[0])

    def _swap_refresh(self, model: ModelConfig) -> bool:
        """The aside table analyzed, both tables locked (waiting at most
        ``Tuning.lock_wait_seconds``), the check made again under the lock, the live table dropped
        and the aside table renamed into its place. False if something came to depend on the live
        table meanwhile: the caller refills it instead."""
        import psycopg

        conn = self.conn
        live, aside = self.table(model), self.refresh_table(model)
        wait = self.tuning.lock_wait_seconds
        conn.execute(sql.analyze(aside))  # before the lock: readers are not kept waiting for it
        conn.execute(sql.lock_timeout(wait))
        try:
            with conn.transaction():
                conn.execute(sql.lock_exclusive(live, aside))
        except psycopg.errors.LockNotAvailable:
            raise transfer_running(
                model.model_name, self.name, f"the full refresh is complete but was not published: other "
                f"sessions kept {live} in use for {wait:g} s (publishing needs it alone for a moment). Nothing "
                "changed: readers still see the old table, and the refresh built aside is kept",
                "run the transfer again once the long queries on the table have ended; it publishes the "
                "refresh") from None
        if not self._swappable(live, aside):
            return False
        try:
            with conn.transaction():
                conn.execute(self.dialect.drop_table(live, if_exists=False))
        except psycopg.errors.DependentObjectsStillExist:
            return False
        self._rename_into(aside, model.model_name)
        return True

    def _refill_live_table(self, model: ModelConfig) -> None:
        """Truncated and refilled; merged (rows deleted, inserted, updated) when another table's
        foreign key references it, since ``TRUNCATE`` refuses that: a row the refresh removes but
        a referencing row still needs is refused by the key (nothing published), or follows its
        ``ON DELETE``."""
        import psycopg

        conn = self.conn
        live, aside = self.table(model), self.refresh_table(model)
        columns = [c.destination_name for c in model.columns]
        (referenced,) = conn.execute(sql.REFERENCED_BY_ANOTHER_TABLE, (live,)).fetchone()
        if not referenced:
            for statement in sql.copy_into_live(live, aside, columns):
                conn.execute(statement)
            return
        try:
            for statement in sql.merge_into_live(live, aside, columns, [c.destination_name for c in model.primary_key]):
                conn.execute(statement)
        except psycopg.errors.ForeignKeyViolation as exc:
            raise DataError(
                f"the full refresh removes rows of {live} that another table's foreign key still "
                f"references ({exc.diag.message_detail or exc.diag.message_primary}); nothing was "
                "published, the refresh built aside is kept",
                model=model.model_name, destination=self.name,
                fix="delete or repoint the referencing rows (or give the foreign key ON DELETE CASCADE "
                    "or SET NULL), then run the transfer again: it publishes the refresh") from None

    def _replace_live_table(self, model: ModelConfig) -> None:
        import psycopg

        try:
            self.conn.execute(self.dialect.drop_table(self.table(model)))
        except psycopg.errors.DependentObjectsStillExist:
            raise SchemaMismatch(
                f"model '{model.model_name}' -> destination '{self.name}': the full refresh changes "
                f"the columns of {self.table(model)}, which must be replaced, but views or other "
                "objects depend on it. Fix: drop them, run the transfer again (the refresh built so "
                "far is kept), then recreate them"
            ) from None
        self._rename_into(self.refresh_table(model), model.model_name)

    # -- outside a transfer's windows ---------------------------------------------------------

    def has_table(self, model: ModelConfig) -> bool:
        import psycopg

        try:
            return self._exists(model.model_name)
        except psycopg.Error as exc:
            raise DataError(
                f"reading the state of PostgreSQL destination '{self.name}' failed: {first_line(exc)}",
                model=model.model_name, destination=self.name,
                fix="check that the destination's user may read its schema and _transfer_status",
            ) from None

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        connection = self.destination.connection
        return (
            spark.read.format("jdbc")
            .options(url=postgres_jdbc_url(connection), driver="org.postgresql.Driver",
                     dbtable=self.table(model), fetchsize="10000",
                     sessionInitStatement="SET TIME ZONE 'UTC'",
                     **jdbc_properties(connection, f"destinations.{self.name}.connection.password"))
            .load()
        )

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        return probe_destination(self, models, target)
