"""PostgreSQL destination: the SQL writer with :class:`~.dialect.PostgresDialect`, and PostgreSQL's own
ways: ``COPY`` into an UNLOGGED staging table; the model's lock, a session advisory lock; the empty-table
load, a swap (the loaded staging table becomes the empty target: each row written once); a refresh
published in one transaction, swapped in when nothing depends on the live table's identity, else refilled
in place (merged into when a foreign key references it), or replaced when its columns changed."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from functools import partial
from typing import TYPE_CHECKING

import psycopg

from transfer_platform import errors
from transfer_platform.config.models import ModelConfig
from transfer_platform.core.routes import Rows
from transfer_platform.core.sql import qualified, quote_ident
from transfer_platform.destinations.postgres import dialect as sql
from transfer_platform.destinations.skeleton import next_state
from transfer_platform.destinations.sql.dialect import STATUS_TABLE
from transfer_platform.destinations.sql.session import PsycopgSession
from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable
from transfer_platform.errors import first_line, translated
from transfer_platform.probes import ProbePlan, Step
from transfer_platform.runtime import connections
from transfer_platform.sources.relay import relay_partition
from transfer_platform.storage.locks import AdvisoryLock, lock_timeout
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.postgres import PostgresDestination

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.core.watermarks import ModelState
    from transfer_platform.destinations.base import WindowLoad, WindowResult
    from transfer_platform.probes import Probe
    from transfer_platform.sources.relay import RelayRead


def copy_partition(connect: dict, copy_sql: str, batches: Iterator) -> Iterator:
    """In a Spark Python worker: ``batches`` (Arrow) into ``copy_sql``; one batch: the rows written."""
    import pyarrow as pa

    try:
        with psycopg.connect(**connect) as conn:
            rows = copy_batches(conn, copy_sql, batches)
    except psycopg.Error as exc:  # the first line only: a clear reason, never the connection settings
        raise RuntimeError(f"COPY into the staging table failed: {first_line(exc)}") from None
    yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))


def copy_batches(conn: psycopg.Connection, copy_sql: str, batches: Iterable) -> int:
    """Arrow batches into ``copy_sql`` as CSV, one at a time; the rows written. pyarrow's CSV quotes every string,
    leaves NULLs bare (PostgreSQL's NULL; ``""`` is an empty string), writes timestamps with microseconds and ``Z``."""
    import pyarrow.csv as pa_csv

    options, rows = pa_csv.WriteOptions(include_header=False), 0
    with conn.cursor().copy(copy_sql) as copy:
        for batch in batches:
            buffer = io.BytesIO()
            pa_csv.write_csv(batch, buffer, options)
            copy.write(buffer.getvalue())
            rows += batch.num_rows
    return rows


class PostgresWriter(SqlWriter):
    DIALECT = sql.PostgresDialect()
    accepts = frozenset({Rows.SPARK, Rows.ARROW, Rows.COPY_STREAM})  # a PostgreSQL source's relay
    LOCKS_END_WITH_SESSION = True  # advisory locks

    def __init__(self, destination: PostgresDestination, tuning: Tuning = DEFAULT) -> None:
        super().__init__(destination, tuning, container=destination.connection.schema_ or "public",
                         what=f"PostgreSQL destination '{destination.name}'")
        self.schema = self.container

    # -- connection, errors, bookkeeping, the lock ---------------------------------------------

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connections.connect_postgres(self.destination.connection, what=self.what, autocommit=True)
        return self._conn

    @property
    def session(self) -> PsycopgSession:
        return PsycopgSession(self.conn)

    def _translated_errors(self, *, lost: bool = True) -> AbstractContextManager[None]:
        """A refused statement as ``MissingPrivilege`` (the grant named); a lost connection as ``ConnectionFailure``,
        but in ``prepare``'s own frame (``lost`` false)."""
        c = self.destination.connection
        role = quote_ident(c.username)
        grant = (f"GRANT USAGE, CREATE ON SCHEMA {quote_ident(self.schema)} TO {role} (the loader creates, alters, "
                 "drops and renames its tables there; tables created by another role must be owned by it: "
                 f"ALTER TABLE ... OWNER TO {role})")
        lost_connection = psycopg.OperationalError if lost else ()  # () matches nothing
        return translated([
            (psycopg.errors.InsufficientPrivilege,
             lambda exc: errors.MissingPrivilege(self.what, role=c.username, reason=first_line(exc), grant=grant)),
            (lost_connection,
             lambda exc: errors.ConnectionFailure(self.what, host=c.host, port=c.port, reason=first_line(exc)))])

    def _preparing(self) -> AbstractContextManager[None]:
        return self._translated_errors(lost=False)

    def _create_container(self) -> None:
        """The schema, created only when missing: PostgreSQL checks ``CREATE SCHEMA IF NOT EXISTS``
        against the database's ``CREATE`` privilege even when the schema exists, which a loader
        that only has ``USAGE, CREATE`` on its own schema does not hold."""
        if self.conn.execute(sql.SCHEMA_EXISTS, (self.schema,)).fetchone()[0]:
            return
        c = self.destination.connection
        role = quote_ident(c.username)
        refused = (f"create it for the loader (CREATE SCHEMA {quote_ident(self.schema)} AUTHORIZATION {role}), "
                   f"or GRANT CREATE ON DATABASE {quote_ident(c.database)} TO {role}")
        # another transfer may create it meanwhile (a race shows as either error)
        with suppress(psycopg.errors.DuplicateSchema, psycopg.errors.UniqueViolation), translated([(
                psycopg.errors.InsufficientPrivilege, lambda exc: errors.MissingPrivilege(
                    f"{self.what}: schema {self.schema!r} does not exist and cannot be created",
                    role=c.username, reason=first_line(exc), grant=refused))]):
            self.conn.execute(sql.create_schema(self.schema))

    def _reach(self) -> None:
        """The base's, ``refresh_state`` added to an older status table; two transfers creating that table at once:
        PostgreSQL refuses the second with a duplicate type or key, and the table is there."""
        with self._translated_errors():
            with suppress(psycopg.errors.DuplicateObject, psycopg.errors.DuplicateTable,
                          psycopg.errors.UniqueViolation):
                super()._reach()
            if "refresh_state" not in self._columns(STATUS_TABLE):
                self.conn.execute(sql.add_refresh_state_column(self.status_table))

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """``committed_state`` reads in one READ ONLY transaction, without row locks."""
        with self._translated_errors(), self.conn.transaction():
            self.conn.execute("SET TRANSACTION READ ONLY")
            yield

    def _status_row(self, model: ModelConfig) -> tuple | None:
        if "refresh_state" in self._columns(STATUS_TABLE):
            return super()._status_row(model)
        # a status table of an older version
        row = self.session.one(self.dialect.read_state(self.status_table, "state", model.model_name))
        return None if row is None else (row[0], None, None)

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """A session advisory lock: the model's staging tables left behind can only be a dead transfer's."""
        key = sql.model_lock_key(self.destination.connection.database, self.schema, model.model_name)
        self._locked.hold(model.model_name, AdvisoryLock(self.conn, key, transfer_id), destination=self.name,
                          wait_seconds=self.tuning.lock_wait_seconds)

    # -- the bulk load: COPY ----------------------------------------------------------------------

    def _run_tasks(self, frame: DataFrame, task: Callable, *args: object) -> None:
        """``task(connect, *args, batches)`` on each partition's Arrow batches in Spark's Python workers
        (``mapInArrow``: memory stays flat); a refused connection is ``ConnectionFailure``."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        c = self.destination.connection
        connect = connections.postgres_connect_kwargs(c, what=f"destinations.{self.name}")
        try:
            frame.mapInArrow(partial(task, connect, *args), "rows long").collect()
        except (Py4JJavaError, PySparkException) as exc:
            reason = connections.spark_error_reason(exc)
            if "Connection" in reason and "refused" in reason:
                raise errors.ConnectionFailure(self.what, host=c.host, port=c.port, reason=reason) from None
            raise

    def _load_frame(self, frame: DataFrame, staging: str, model: ModelConfig) -> None:
        """Each partition into one ``COPY`` of its own, ``max_concurrent_queries_per_transfer`` at once."""
        self._run_tasks(frame.coalesce(self.destination.max_concurrent_queries_per_transfer), copy_partition,
                        sql.copy_csv(staging, frame.columns))

    def write_relayed(self, relay: RelayRead, spark: SparkSession, load: WindowLoad) -> WindowResult:
        """:meth:`write_window` for a window relayed from a PostgreSQL source (``sources/relay.py``): its slices over
        ``max_concurrent_queries_per_transfer`` Spark tasks at most, each value cast to the staging column's type."""
        def stage(staging: StagingTable) -> StagingTable:
            names = [dest for _, dest in relay.columns]
            with self._translated_errors():
                types = self._columns(staging.name)
            tasks = min(relay.slices, self.destination.max_concurrent_queries_per_transfer)
            self._run_tasks(spark.range(relay.slices, numPartitions=tasks), partial(relay_partition, relay),
                            staging.table, sql.copy_csv(staging.table, names, "binary"), {n: types[n] for n in names})
            return self._staged(staging, load)
        return self._write(load, stage, in_memory=False)

    def write_streamed(self, stream: Callable[[dict[str, str]], Iterable[bytes]], load: WindowLoad) -> WindowResult:
        """:meth:`write_arrow` for a small window streamed from a PostgreSQL source by this process in binary COPY
        format (``stream(types)``: ``DirectReads.copy_out``'s chunks, cast to the staging columns' types)."""
        def stage(staging: StagingTable) -> StagingTable:
            names = [c.destination_name for c in load.model.columns]
            with self._translated_errors(), self._refused_values(load):
                types = self._columns(staging.name)
                with self.conn.cursor().copy(sql.copy_csv(staging.table, names, "binary")) as into:
                    for chunk in stream({n: types[n] for n in names}):
                        into.write(chunk)
            # one read of a source whose unique index holds each key once (the only source streamed),
            # each key value cast to a type that keeps it distinct: no key twice to look for
            staging.duplicates_refused = True
            return self._staged(staging, load)
        return self._write(load, stage, in_memory=True)

    def _load_arrow(self, batch: pa.Table, staging: str, load: WindowLoad) -> None:
        with self._translated_errors(), self._refused_values(load):
            copy_batches(self.conn, sql.copy_csv(staging, batch.column_names), batch.to_batches())

    def _refused_values(self, load: WindowLoad) -> AbstractContextManager[None]:
        """Around a ``COPY`` into the staging table: a value a column cannot hold, named."""
        return translated([((psycopg.DataError, psycopg.IntegrityError), lambda exc: errors.DataError(
            f"COPY into the staging table failed: {first_line(exc)}", model=load.model.model_name,
            destination=self.name, fix="check that each column's data_type matches the source values"))])

    # -- the empty-table load: swap (the loaded staging table becomes the table) -----------------

    def _start_empty_load(self, load: WindowLoad, staging: StagingTable) -> bool:
        """The staging table logged, so that it can become the table, if nothing depends on it."""
        self._create_staging_table(staging, load.model, None, logged=True)
        return self._replaceable(staging.target, staging.table)

    def _publish_empty_load(self, staging: StagingTable, load: WindowLoad) -> ModelState | None:
        """In one transaction: the status row locked, the staging table keyed (a key twice refused by name) and
        swapped in, the state recorded; ``None`` if the target got rows or a dependent meanwhile (then merged)."""
        with self._atomically(load):
            before = self._lock_state(load.model, "refresh_state" if load.into_refresh else "state")
            self.conn.execute(sql.lock_exclusive(staging.target))
            if self._has_rows(staging.target):
                return None
            keys = [c.destination_name for c in load.model.primary_key]
            try:
                with self.conn.transaction():
                    self.conn.execute(sql.add_primary_key(staging.table, keys))
            except psycopg.errors.UniqueViolation:
                self._refuse_duplicate_keys(load, staging)
                raise  # not reached: the check above names the duplicate
            if not self._replace(staging.target, staging.table, staging.target_name):
                return None
            new_state = next_state(before, load, staging.max_last_modified)
            self._write_state(load, new_state)
        return new_state

    def _replaceable(self, target: str, staging: str, *, key: bool = False) -> bool:
        """Nothing lost by replacing ``target`` with ``staging``: no dependent, alike as :mod:`.dialect` says."""
        alike = [sql.SAME_OWNER_GRANTS_AND_OPTIONS, sql.SAME_COLUMNS] + ([sql.SAME_PRIMARY_KEY] if key else [])
        return (not self.conn.execute(sql.DEPENDENTS_BUT_THE_KEY, {"t": target}).fetchone()[0]
                and all(self.conn.execute(same, (target, staging)).fetchone()[0] for same in alike))

    def _replace(self, target: str, table: str, name: str) -> bool:
        """``target`` dropped, ``table`` renamed ``name``; False, nothing changed, if ``target`` got a dependent."""
        try:
            with self.conn.transaction():
                self.conn.execute(self.dialect.drop_table(target, if_exists=False))
        except psycopg.errors.DependentObjectsStillExist:
            return False
        self._rename_into(table, name)
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
            with translated([(psycopg.errors.DependentObjectsStillExist, lambda exc: errors.SchemaMismatch(
                    f"model '{model.model_name}' -> destination '{self.name}': the full refresh changes the columns "
                    f"of {live}, which must be replaced, but views or other objects depend on it. Fix: drop them, "
                    "run the transfer again (the refresh built so far is kept), then recreate them"))]):
                self.conn.execute(self.dialect.drop_table(live))
            self._rename_into(aside, model.model_name)
        elif not (self._replaceable(live, aside, key=True) and self._swap_refresh(model, live, aside)):
            self._refill_live_table(model, live, aside)
        self._record_state(model, state, transfer_id)
        self._set_state(model, "refresh_state", None)

    def _swap_refresh(self, model: ModelConfig, live: str, aside: str) -> bool:
        """Both tables locked (waiting ``Tuning.lock_wait_seconds`` at most for the live table's readers, else
        refused), checked again and swapped; False if the live table got a dependent (then refilled)."""
        wait = self.tuning.lock_wait_seconds
        self.conn.execute(sql.analyze(aside))  # before the lock: readers are not kept waiting for it
        self.conn.execute(lock_timeout(wait))
        with translated([(psycopg.errors.LockNotAvailable, lambda exc: errors.transfer_running(
                model.model_name, self.name, f"the full refresh is complete but was not published: other sessions "
                f"kept {live} in use for {wait:g} s (publishing needs it alone for a moment). Nothing changed: readers "
                "still see the old table, and the refresh built aside is kept", "run the transfer again once the long "
                "queries on the table have ended; it publishes the refresh"))]), self.conn.transaction():
            self.conn.execute(sql.lock_exclusive(live, aside))
        return self._replaceable(live, aside, key=True) and self._replace(live, aside, model.model_name)

    def _refill_live_table(self, model: ModelConfig, live: str, aside: str) -> None:
        """Truncated and refilled, or merged into when a foreign key references it: a row the refresh removes but
        a referencing row needs is refused by the key (nothing published), or follows its ``ON DELETE``."""
        columns = [c.destination_name for c in model.columns]
        if not self.conn.execute(sql.REFERENCED_BY_ANOTHER_TABLE, (live,)).fetchone()[0]:
            for statement in sql.copy_into_live(live, aside, columns):
                self.conn.execute(statement)
            return
        with translated([(psycopg.errors.ForeignKeyViolation, lambda exc: errors.DataError(
                f"the full refresh removes rows of {live} that another table's foreign key still references "
                f"({exc.diag.message_detail or exc.diag.message_primary}); nothing was published, the refresh "
                "built aside is kept", model=model.model_name, destination=self.name,
                fix="delete or repoint the referencing rows (or give the foreign key ON DELETE CASCADE or SET "
                    "NULL), then run the transfer again: it publishes the refresh"))]):
            for statement in sql.merge_into_live(live, aside, columns, [c.destination_name for c in model.primary_key]):
                self.conn.execute(statement)

    # -- outside a transfer's windows ---------------------------------------------------------

    def has_table(self, model: ModelConfig) -> bool:
        with translated([(psycopg.Error, lambda exc: errors.DataError(
                f"reading the state of PostgreSQL destination '{self.name}' failed: {first_line(exc)}",
                model=model.model_name, destination=self.name,
                fix="check that the destination's user may read its schema and _transfer_status"))]):
            return self._exists(model.model_name)

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        c = self.destination.connection
        return spark.read.format("jdbc").options(
            url=connections.postgres_jdbc_url(c), driver="org.postgresql.Driver", dbtable=self.table(model),
            fetchsize="10000", sessionInitStatement="SET TIME ZONE 'UTC'",
            **connections.jdbc_properties(c, f"destinations.{self.name}.connection.password")).load()

    def _probe_plan(self, models: list[ModelConfig], name: str) -> ProbePlan:
        """Everything a transfer does in the schema, in one transaction rolled back (the DDL is transactional:
        nothing is left, not even a schema created for it); the models' tables must be the loader's."""
        c = self.destination.connection
        role, schema = quote_ident(c.username), quote_ident(self.schema)
        create_schema = (f"CREATE SCHEMA {schema} AUTHORIZATION {role} (as an administrator), or GRANT CREATE ON "
                         f"DATABASE {quote_ident(c.database)} TO {role}")
        steps = [Step(step, f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {role}" if index else create_schema, statements,
                      "" if index else "it does not exist yet; the first transfer creates it")
                 for index, (step, statements) in enumerate(sql.probe_steps(self.schema, name))]

        def connect() -> None:  # not in autocommit: one transaction
            self._conn = connections.connect_postgres(c, what=self.what)

        return ProbePlan(f"log in to database {c.database!r} as {c.username!r}", connect,
                         "check username, database and the password's environment variable", steps, psycopg.Error,
                         cleanup=[lambda: self.conn.rollback()], endpoint=(c.host, c.port),
                         after=[f"own the model tables and {STATUS_TABLE} in schema {schema}"])

    def _probe_run(self, probe: Probe, plan: ProbePlan, models: list[ModelConfig]) -> None:
        """The schema's creation tried only where it is missing, each statement in a savepoint; then another role's
        table, which the loader cannot alter or drop (evolution, full refresh)."""
        conn, role = self.conn, quote_ident(self.destination.connection.username)

        def execute(statement: str) -> None:
            with conn.transaction():
                conn.execute(statement)

        (exists,) = conn.execute(sql.SCHEMA_EXISTS, (self.schema,)).fetchone()
        probe.run(plan.steps[1:] if exists else plan.steps, execute, plan.errors, plan.reason)
        tables = [self.status_table] + [t for m in models for t in (self.table(m), self.refresh_table(m))]
        foreign = [qualified(*row) for row in conn.execute(sql.not_owned(len(tables)), tables).fetchall()]
        if foreign:
            probe.failed(plan.after[0], f"owned by another role: {', '.join(foreign)}",
                         "; ".join(f"ALTER TABLE {t} OWNER TO {role}" for t in foreign))
        else:
            probe.passed(plan.after[0])
