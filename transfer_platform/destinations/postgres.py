"""PostgreSQL destination: a staged upsert.

Per window: Spark writes the batch into an UNLOGGED staging table with the target's columns; then
one transaction checks the batch (no NULL key or last-modified value, no duplicate key), merges it
on the primary key (never replacing a row by an older one; an ``is_append_only`` model only
inserts: ``ON CONFLICT DO NOTHING``), records the model's row in
``_transfer_status`` with the new watermark, and drops the staging table. A crash before COMMIT
leaves the target and the watermark as they were; the next transfer drops the orphaned staging
table in :meth:`PostgresWriter.prepare`.

A full refresh loads the same way into a table built aside (``_tp_refresh_<model hash>``), with
its progress in ``_transfer_status.refresh_state``; once complete, one transaction publishes it and
moves the watermark. When nothing depends on the live table's identity (the empty-target fast
path's check: no view, foreign key, trigger, extra index, policy, publication, comment, grant or
owner of its own; and the aside table's columns and key exactly the live table's), the aside table
is analyzed, both tables are locked (waiting at most ``LOCK_WAIT_SECONDS`` for the live table's
readers, else refused with nothing changed), the live table is dropped and the aside table and its
key renamed into its place: every row is written once. With no live table yet, the aside table is
renamed into its place. When something does depend on it, the live table is truncated
and refilled from the aside table (merged into, when another table's foreign key references it:
``TRUNCATE`` refuses that), its identity (OID) kept, so its views, foreign keys, grants and
triggers survive. When its columns no longer match the model, it is dropped and replaced by the
aside table (refused, naming the fix, if a view depends on it). Until that commit readers see the
old table whole; a crash before it changes nothing. An unfinished refresh is carried on by the
next transfer.

Schema evolution on an incremental transfer: a column added to the model is added (NULL in rows
delivered before it), a column removed from the model is dropped only with the model's
``allow_column_drop`` (otherwise refused, naming it: ``core/columns.py``), a changed type or
primary key is refused with the advice to run a full refresh. Every refusal comes before the first
``ALTER``; the transfer proved its read on the source before that (``SourceReader.check_read``).

Every statement's text comes from ``postgres_sql.py`` (imported as ``sql``), planned and tested
without a database; this module runs them, in order, in their transactions, and turns what
PostgreSQL refuses into errors that name the fix.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from functools import partial
from typing import TYPE_CHECKING

from transfer_platform.config.models import ModelConfig, PostgresDestination
from transfer_platform.connections import (
    connect_postgres,
    jdbc_properties,
    postgres_connect_kwargs,
    postgres_jdbc_url,
    spark_error_reason,
)
from transfer_platform.core.columns import column_changes, refuse_column_drops
from transfer_platform.core.sql import (
    marked_deleted,
    plan_soft_delete,
    plan_upsert,
    qualified,
    quote_ident,
)
from transfer_platform.core.types import TYPES
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations import postgres_sql as sql
from transfer_platform.destinations.base import (
    Prepared,
    WindowLoad,
    WindowResult,
    duplicate_key_error,
    null_key_error,
    null_last_modified_error,
    staging_suffix,
)
from transfer_platform.destinations.postgres_sql import (
    batch_summary_sql,
    delete_matching_sql,
    model_lock_key,
    probe_steps,
    status_ddl,
    target_ddl,
)
from transfer_platform.errors import (
    ConfigError,
    ConnectionFailure,
    DataError,
    MissingPrivilege,
    SchemaMismatch,
    TransferRunning,
)
from transfer_platform.phases import log_phase

if TYPE_CHECKING:
    import psycopg
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.probes import Check, Probe

STATUS_TABLE = "_transfer_status"
STAGING_PREFIX = "_tp_stg_"
#: how long a transfer waits for the lock of a model that another transfer holds
LOCK_WAIT_SECONDS = 10
REFRESH_PREFIX = "_tp_refresh_"


def copy_partition(connect: dict, copy_sql: str, batches: Iterator) -> Iterator:
    """Runs in a Spark Python worker: ``batches`` (Arrow record batches) into ``copy_sql`` as CSV.

    pyarrow's CSV quotes every string and leaves NULLs bare (PostgreSQL's CSV reads a bare empty
    field as NULL, ``""`` as an empty string) and writes timestamps with microseconds and ``Z``.
    """
    import psycopg
    import pyarrow as pa

    try:
        with psycopg.connect(**connect) as conn:
            rows = copy_batches(conn, copy_sql, batches)
    except psycopg.Error as exc:
        # the first line only: a clear reason, never the connection settings
        raise RuntimeError(f"COPY into the staging table failed: {str(exc).strip().splitlines()[0]}") from None
    yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))


def copy_batches(conn: psycopg.Connection, copy_sql: str, batches: Iterable) -> int:
    """Arrow record batches into ``copy_sql`` (``COPY ... FROM STDIN (FORMAT csv)``) on ``conn``,
    one batch of CSV at a time; the rows written. In a Spark Python worker (``copy_partition``)
    or in this process (a window read with others, already here as Arrow)."""
    import io

    import pyarrow.csv as pa_csv

    options = pa_csv.WriteOptions(include_header=False)
    rows = 0
    with conn.cursor().copy(copy_sql) as copy:
        for batch in batches:
            buffer = io.BytesIO()
            pa_csv.write_csv(batch, buffer, options)
            copy.write(buffer.getvalue())
            rows += batch.num_rows
    return rows


def full_refresh_fix(destination: str, model: str) -> str:
    return f"run a full refresh: transfer-platform transfer {destination} --model {model} --full-refresh"


class PostgresWriter:
    def __init__(self, destination: PostgresDestination) -> None:
        self.destination = destination
        self.name = destination.name
        self.schema = destination.connection.schema_ or "public"
        self.what = f"PostgreSQL destination '{destination.name}'"
        self._conn: psycopg.Connection | None = None
        self._locked: set[int] = set()  # the models whose lock this writer's session holds

    # -- connection ---------------------------------------------------------------------------

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect_postgres(self.destination.connection, what=self.what, autocommit=True)
        return self._conn

    def close(self) -> None:
        """Release the connection, and with it the models' locks (session advisory locks)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._locked.clear()

    def check(self) -> None:
        self.conn.execute("SELECT 1")

    def table(self, model: ModelConfig) -> str:
        return qualified(self.schema, model.model_name)

    def refresh_table_name(self, model: ModelConfig) -> str:
        return REFRESH_PREFIX + staging_suffix(model.model_name, "").rstrip("_")

    def refresh_table(self, model: ModelConfig) -> str:
        return qualified(self.schema, self.refresh_table_name(model))

    @property
    def status_table(self) -> str:
        return qualified(self.schema, STATUS_TABLE)

    # -- protocol -----------------------------------------------------------------------------

    def prepare(self, model: ModelConfig, transfer_id: str, *, full_refresh: bool = False) -> Prepared:
        with self._missing_privileges():
            return self._prepare(model, transfer_id, full_refresh=full_refresh)

    def _prepare(self, model: ModelConfig, transfer_id: str, *, full_refresh: bool) -> Prepared:
        conn = self.conn
        self._ensure_schema()
        self._ensure_status_table()
        if "refresh_state" not in self._columns(self.status_table):  # a table from an older version
            conn.execute(sql.add_refresh_state_column(self.status_table))
        self.lock_model(model, transfer_id)
        self._drop_stale_staging(model)  # under the lock: no live transfer of the model owns any
        state = self.read_state(model)
        if full_refresh:
            return Prepared(state, self._begin_refresh(model, state))
        pending = self._pending_refresh(model)
        if pending is not None:
            return Prepared(state, pending)
        conn.execute(target_ddl(self.table(model), model))
        return Prepared(state, None, self._evolve(model))

    def committed_state(self, model: ModelConfig) -> Prepared:
        """The model's state and its unfinished refresh's, read in one READ ONLY transaction
        without row locks; a schema or ``_transfer_status`` that does not exist (checked with
        ``to_regclass``, which creates nothing) means nothing was ever committed."""
        conn = self.conn
        with self._translated_errors(), conn.transaction():
            conn.execute("SET TRANSACTION READ ONLY")
            (exists,) = conn.execute(sql.TABLE_EXISTS, (self.status_table,)).fetchone()
            if not exists:
                return Prepared(ModelState())
            has_refresh = "refresh_state" in self._columns(self.status_table)  # older tables lack it
            row = conn.execute(sql.read_states(self.status_table, has_refresh=has_refresh),
                               (model.model_name,)).fetchone()
            state = ModelState.from_json(row[0] if row else None)
            if row is None or row[1] is None:
                return Prepared(state)
            if not self._columns_match(model, self.refresh_table(model)):
                # as _pending_refresh: the next transfer starts this refresh again
                return Prepared(state, ModelState(high_watermark=state.high_watermark))
            return Prepared(state, ModelState.from_json(row[1]))

    def _ensure_schema(self) -> None:
        """Create the schema only when it is missing: PostgreSQL checks ``CREATE SCHEMA IF NOT
        EXISTS`` against the database's ``CREATE`` privilege even when the schema exists, which a
        loader that only has ``USAGE, CREATE`` on its own schema does not hold."""
        import psycopg

        exists = self.conn.execute(sql.SCHEMA_EXISTS, (self.schema,)).fetchone()[0]
        if exists:
            return
        try:
            self.conn.execute(sql.create_schema(self.schema))
        except (psycopg.errors.DuplicateSchema, psycopg.errors.UniqueViolation):
            pass  # another transfer created it meanwhile (a race shows as either)
        except psycopg.errors.InsufficientPrivilege as exc:
            connection = self.destination.connection
            raise MissingPrivilege(
                f"{self.what}: schema {self.schema!r} does not exist and cannot be created",
                role=connection.username, reason=str(exc).strip().splitlines()[0],
                grant=(f"create it for the loader (CREATE SCHEMA {quote_ident(self.schema)} AUTHORIZATION "
                       f"{quote_ident(connection.username)}), or GRANT CREATE ON DATABASE "
                       f"{quote_ident(connection.database)} TO {quote_ident(connection.username)}"),
            ) from None

    def _ensure_status_table(self) -> None:
        """``CREATE TABLE IF NOT EXISTS`` of the status table, which two transfers starting on a new
        destination at once may both run (before any model's lock): PostgreSQL then refuses the
        second with a duplicate type or key, which means the table is there."""
        import psycopg

        with suppress(psycopg.errors.DuplicateObject, psycopg.errors.DuplicateTable, psycopg.errors.UniqueViolation):
            self.conn.execute(status_ddl(self.status_table))  # or another transfer created it meanwhile

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
                self.what, role=connection.username, reason=str(exc).strip().splitlines()[0],
                grant=f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {role} (the loader creates, alters, "
                      "drops and renames its tables there; tables created by another role must be "
                      f"owned by it: ALTER TABLE ... OWNER TO {role})",
            ) from None

    def read_state(self, model: ModelConfig, column: str = "state") -> ModelState:
        row = self.conn.execute(sql.read_state(self.status_table, column), (model.model_name,)).fetchone()
        return ModelState.from_json(row[0] if row else None)

    def write_window(self, frame: DataFrame, load: WindowLoad) -> WindowResult:
        return self._write(load, partial(self._stage, frame))

    def write_arrow(self, batch: pa.Table, load: WindowLoad) -> WindowResult:
        """A window already read into this process (with others, in one Spark job): COPY from
        here into the staging table, then as :meth:`write_window`."""
        return self._write(load, partial(self._copy, load, batch))

    def _write(self, load: WindowLoad, stage: Callable[[str], None]) -> WindowResult:
        """Create the staging table, ``stage`` the batch into it, check and merge; drop it."""
        model = load.model
        target_name = self.refresh_table_name(model) if load.into_refresh else model.model_name
        target = qualified(self.schema, target_name)
        staging_name = STAGING_PREFIX + staging_suffix(model.model_name, load.transfer_id)
        staging = qualified(self.schema, staging_name)
        self.conn.execute(sql.drop_table(staging))
        # an empty target that nothing depends on can be *replaced* by the staging table: the batch
        # is then written once (no merge); the staging table is logged so that it can become it
        swappable = self._is_empty(target)
        # the target's columns without its constraints: a NULL key is refused by our check, by name
        self.conn.execute(sql.staging_like(staging, target, logged=swappable))
        swappable = swappable and self._replaceable(target, staging)
        ids = {"transfer_id": load.transfer_id, "destination": self.name, "model": model.model_name}
        try:
            stage(staging)
            log_phase("stage", **ids, staging_table=staging_name)
            return self._merge(load, target_name, staging, swappable=swappable)
        finally:
            self.conn.execute(sql.drop_table(staging))
            log_phase("clean up", **ids, staging_table=staging_name)

    def write_empty(self, load: WindowLoad) -> WindowResult:
        """The window holds no row: only its state, in one transaction (no staging table)."""
        model = load.model
        state_column = "refresh_state" if load.into_refresh else "state"
        with self._translated_errors(), self.conn.transaction():
            state = self._lock_state(model, state_column)
            new_state = state.after_window(load.progress, batch_max_last_modified=None,
                                           configured_start=load.configured_start)
            if load.into_refresh:
                self.conn.execute(sql.set_refresh_state(self.status_table), (new_state.to_json(), model.model_name))
            else:
                self._record_state(model, new_state, load.transfer_id)
        return WindowResult(0, 0, 0, None, new_state)

    def publish_refresh(self, model: ModelConfig, transfer_id: str) -> ModelState:
        conn = self.conn
        live, aside = self.table(model), self.refresh_table(model)
        with self._translated_errors(), conn.transaction():
            state = self._lock_state(model, "refresh_state")
            if not self._columns_match(model, live):  # a new shape, or no live table yet
                self._replace_live_table(model)
            elif not (self._swappable(live, aside) and self._swap_refresh(model)):
                self._refill_live_table(model)
            self._record_state(model, state, transfer_id)
            conn.execute(sql.set_refresh_state(self.status_table), (None, model.model_name))
        return state

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        """Remove the rows whose primary key and last-modified value ``frame`` holds (a row that
        changed since is left alone): staged like a batch (COPY from Spark's workers, so memory
        stays flat), then one ``DELETE ... USING`` in one transaction."""
        columns = [c.destination_name for c in model.primary_key] + [model.last_modified.destination_name]
        staging = qualified(self.schema, STAGING_PREFIX + staging_suffix(model.model_name, transfer_id))
        with self._translated_errors():
            self.conn.execute(sql.drop_table(staging))
            self.conn.execute(sql.staging_like(staging, self.table(model), logged=False, columns=columns))
            try:
                self._stage(frame.select(*columns), staging)
                with self.conn.transaction():
                    return self.conn.execute(delete_matching_sql(self.table(model), staging, columns)).rowcount
            finally:
                self.conn.execute(sql.drop_table(staging))

    def has_table(self, model: ModelConfig) -> bool:
        import psycopg

        try:
            return self.conn.execute(sql.TABLE_EXISTS, (self.table(model),)).fetchone()[0]
        except psycopg.Error as exc:
            raise DataError(
                f"reading the state of PostgreSQL destination '{self.name}' failed: "
                f"{(str(exc).strip().splitlines() or [type(exc).__name__])[0]}",
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

    # -- test-connection ----------------------------------------------------------------------

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        """Reach, log in, then everything a transfer does in the schema, tried in one transaction
        that is rolled back (PostgreSQL's DDL is transactional: nothing is left behind, not even
        a schema created for the probe); the models' existing tables must be the loader's."""
        from transfer_platform.probes import Probe

        probe = Probe(target)
        connection = self.destination.connection
        role, schema = quote_ident(connection.username), quote_ident(self.schema)
        steps = probe_steps(self.schema, "_tp_probe_" + uuid.uuid4().hex[:12])
        owned = [f"own the model tables and {STATUS_TABLE} in schema {schema}"]
        login = f"log in to database {connection.database!r} as {connection.username!r}"
        if not probe.reach(connection.host, connection.port):
            probe.skipped([login, *[name for name, _ in steps], *owned], "the server cannot be reached")
            return probe.checks
        try:
            conn = connect_postgres(connection, what=self.what)
        except (ConnectionFailure, ConfigError) as exc:
            probe.failed(login, getattr(exc, "reason", None) or str(exc).splitlines()[-1].strip(),
                         "check username, database and the password's environment variable")
            probe.skipped([name for name, _ in steps] + owned, "cannot log in")
            return probe.checks
        probe.passed(login)
        with conn:
            self._probe_schema(conn, probe, steps, role, schema)
            self._probe_ownership(conn, probe, models, owned[0], role)
            conn.rollback()
        return probe.checks

    def _probe_schema(self, conn: psycopg.Connection, probe: Probe, steps: list, role: str, schema: str) -> None:
        import psycopg

        connection = self.destination.connection
        (exists,) = conn.execute(sql.SCHEMA_EXISTS, (self.schema,)).fetchone()
        for index, (name, statements) in enumerate(steps):
            if index == 0 and exists:
                continue  # the schema is there: the loader does not need to create it
            try:
                with conn.transaction():
                    for statement in statements:
                        conn.execute(statement)
            except psycopg.Error as exc:
                fix = (f"CREATE SCHEMA {schema} AUTHORIZATION {role} (as an administrator), or GRANT "
                       f"CREATE ON DATABASE {quote_ident(connection.database)} TO {role}" if index == 0
                       else f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {role}")
                probe.failed(name, str(exc).strip().splitlines()[0], fix)
                probe.skipped([later for later, _ in steps[index + 1:]], "the step before failed")
                return
            probe.passed(name, "it does not exist yet; the first transfer creates it" if index == 0 else "")

    def _probe_ownership(self, conn: psycopg.Connection, probe: Probe, models: list[ModelConfig],
                         name: str, role: str) -> None:
        """A table of another role cannot be altered or dropped by the loader (evolution, full
        refresh): each existing model table, refresh table and the status table must be its."""
        tables = [self.status_table] + [t for m in models for t in (self.table(m), self.refresh_table(m))]
        foreign = [qualified(*row) for row in conn.execute(sql.not_owned(len(tables)), tables).fetchall()]
        if foreign:
            probe.failed(name, f"owned by another role: {', '.join(foreign)}",
                         "; ".join(f"ALTER TABLE {t} OWNER TO {role}" for t in foreign))
        else:
            probe.passed(name)

    # -- full refresh -------------------------------------------------------------------------

    def _begin_refresh(self, model: ModelConfig, live: ModelState) -> ModelState:
        """A new, empty table aside; progress starts over (the live high watermark is kept as
        the reference of ``delta_rows_transferred``)."""
        state = ModelState(high_watermark=live.high_watermark)
        aside = self.refresh_table(model)
        with self.conn.transaction():
            self.conn.execute(sql.drop_table(aside))
            self.conn.execute(target_ddl(aside, model))
            self._ensure_status_row(model)
            self.conn.execute(sql.set_refresh_state(self.status_table), (state.to_json(), model.model_name))
        return state

    def _pending_refresh(self, model: ModelConfig) -> ModelState | None:
        row = self.conn.execute(sql.read_state(self.status_table, "refresh_state"), (model.model_name,)).fetchone()
        if row is None or row[0] is None:
            return None
        if not self._columns_match(model, self.refresh_table(model)):
            # the model changed while a refresh was unfinished: start that refresh again
            return self._begin_refresh(model, self.read_state(model))
        return ModelState.from_json(row[0])

    def _swappable(self, live: str, aside: str) -> bool:
        """The aside table can replace the live one and nothing is lost: the fast path's check
        (dependents, owner, grants, options, columns in order) and the same primary key."""
        return self._replaceable(live, aside) and bool(self.conn.execute(sql.SAME_PRIMARY_KEY, (live, aside)).fetchone()[0])

    def _swap_refresh(self, model: ModelConfig) -> bool:
        """Publish the complete aside table by replacing the live one, in the current transaction:
        the aside table is analyzed (readers' plans get statistics at once), both tables are
        locked, waiting at most ``LOCK_WAIT_SECONDS`` for the live table's readers (refused after
        that, nothing changed), the check is made again under the lock, the live table dropped and
        the aside table and its key renamed into its place. False, with the lock held and nothing
        else changed (but the aside table's statistics), if something came to depend on the live
        table meanwhile: the caller refills it instead."""
        import psycopg

        conn = self.conn
        live, aside = self.table(model), self.refresh_table(model)
        conn.execute(sql.analyze(aside))  # before the lock: readers are not kept waiting for it
        conn.execute(sql.lock_timeout(LOCK_WAIT_SECONDS))
        try:
            with conn.transaction():
                conn.execute(sql.lock_exclusive(live, aside))
        except psycopg.errors.LockNotAvailable:
            raise TransferRunning(
                f"model '{model.model_name}' -> destination '{self.name}': the full refresh is "
                f"complete but was not published: other sessions kept {live} in use for "
                f"{LOCK_WAIT_SECONDS} s (publishing needs it alone for a moment). Nothing changed: "
                "readers still see the old table, and the refresh built aside is kept. Fix: run the "
                "transfer again once the long queries on the table have ended; it publishes the "
                "refresh") from None
        if not self._swappable(live, aside):
            return False
        try:
            with conn.transaction():
                conn.execute(sql.drop_table(live, if_exists=False))
        except psycopg.errors.DependentObjectsStillExist:
            return False
        self._rename_into(aside, model.model_name)
        return True

    def _refill_live_table(self, model: ModelConfig) -> None:
        """Something depends on the live table's identity: its rows are replaced, not it. Truncated
        and refilled; merged (rows deleted, inserted, updated) when another table's foreign key
        references it, since ``TRUNCATE`` refuses that: a row the refresh removes but a referencing
        row still needs is refused by the key (nothing published), or follows its ``ON DELETE``."""
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

        conn = self.conn
        try:
            conn.execute(sql.drop_table(self.table(model)))
        except psycopg.errors.DependentObjectsStillExist:
            raise SchemaMismatch(
                f"model '{model.model_name}' -> destination '{self.name}': the full refresh changes "
                f"the columns of {self.table(model)}, which must be replaced, but views or other "
                "objects depend on it. Fix: drop them, run the transfer again (the refresh built so "
                "far is kept), then recreate them"
            ) from None
        self._rename_into(self.refresh_table(model), model.model_name)

    # -- schema -------------------------------------------------------------------------------

    def _columns(self, table: str) -> dict[str, str]:
        """Column name -> type as ``format_type`` writes it; empty if the table does not exist."""
        return dict(self.conn.execute(sql.COLUMNS, (table,)).fetchall())

    def _primary_key(self, table: str) -> list[str]:
        return [r[0] for r in self.conn.execute(sql.PRIMARY_KEY, (table,)).fetchall()]

    def _columns_match(self, model: ModelConfig, table: str) -> bool:
        expected = {c.destination_name: TYPES[c.data_type].postgres for c in model.columns}
        return (self._columns(table) == expected
                and self._primary_key(table) == sorted(c.destination_name for c in model.primary_key))

    def _evolve(self, model: ModelConfig) -> tuple[str, ...]:
        """Bring the live table's columns to the model's; refuse what only a refresh can do."""
        table = self.table(model)
        existing = self._columns(table)
        where = f"model '{model.model_name}' -> destination '{self.name}'"
        fix = full_refresh_fix(self.name, model.model_name)
        for column in model.columns:
            expected = TYPES[column.data_type].postgres
            actual = existing.get(column.destination_name)
            if actual is not None and actual != expected:
                raise SchemaMismatch(
                    f"{where}: column '{column.destination_name}' is {actual} in {table} but the "
                    f"model says {column.data_type} ({expected}); a type is never changed in place. "
                    f"Fix: {fix}")
        wanted_key = sorted(c.destination_name for c in model.primary_key)
        actual_key = self._primary_key(table)
        if actual_key != wanted_key:
            raise SchemaMismatch(
                f"{where}: the primary key of {table} is ({', '.join(actual_key)}) but the model's is "
                f"({', '.join(wanted_key)}). Fix: {fix}")
        planned = column_changes(list(existing), [c.destination_name for c in model.columns])
        refuse_column_drops(model.model_name, self.name, table, planned.dropped, allowed=model.allow_column_drop)
        added = [c for c in model.columns if c.destination_name in planned.added]
        dropped = planned.dropped
        changes = []
        with self.conn.transaction():
            for column in added:
                self.conn.execute(sql.add_column(table, column.destination_name, TYPES[column.data_type].postgres))
                changes.append(f"added column {column.destination_name} ({column.data_type}) to {table}; "
                               "rows delivered before hold NULL in it until they change or a full "
                               "refresh runs")
            for name in dropped:
                self.conn.execute(sql.drop_column(table, name))
                changes.append(f"dropped column {name} from {table} (no longer in the model)")
        return tuple(changes)

    # -- steps --------------------------------------------------------------------------------

    def _stage(self, frame: DataFrame, staging: str) -> None:
        """COPY the batch into the staging table: Spark hands each partition to a Python worker as
        Arrow batches (``mapInArrow``, so memory stays flat), which writes them as CSV into one
        ``COPY ... FROM STDIN`` in its own transaction. A failed partition commits nothing; at most
        ``max_concurrent_queries_per_transfer`` partitions write at once."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        connection = self.destination.connection
        copy = partial(copy_partition, postgres_connect_kwargs(connection, what=f"destinations.{self.name}"),
                       sql.copy_csv(staging, frame.columns))
        limit = self.destination.max_concurrent_queries_per_transfer
        try:
            frame.coalesce(limit).mapInArrow(copy, "rows long").collect()
        except (Py4JJavaError, PySparkException) as exc:
            reason = spark_error_reason(exc)
            if "Connection" in reason and "refused" in reason:
                raise ConnectionFailure(self.what, host=connection.host, port=connection.port,
                                        reason=reason) from None
            raise

    def _copy(self, load: WindowLoad, batch: pa.Table, staging: str) -> None:
        import psycopg

        with self._translated_errors():
            try:
                copy_batches(self.conn, sql.copy_csv(staging, batch.column_names), batch.to_batches())
            except (psycopg.DataError, psycopg.IntegrityError) as exc:  # a value the column cannot hold
                raise DataError(f"COPY into the staging table failed: {str(exc).strip().splitlines()[0]}",
                                model=load.model.model_name, destination=self.name,
                                fix="check that each column's data_type matches the source values") from None

    def _merge(self, load: WindowLoad, target_name: str, staging: str, *, swappable: bool) -> WindowResult:
        model = load.model
        target = qualified(self.schema, target_name)
        state_column = "refresh_state" if load.into_refresh else "state"
        conn = self.conn
        with self._translated_errors(), conn.transaction():
            state = self._lock_state(model, state_column)
            rows, delta_rows, max_lm, volume, rows_deleted = self._checked_batch(load, staging, state)
            if state.high_watermark is None:
                delta_rows = rows
            marker, skip = model.deletion_marker, None
            if model.removes_deleted_rows:  # rows marked deleted are removed, never inserted
                skip, rows_deleted = marked_deleted(marker.destination_name, marker.data_type), 0
                if swappable:  # an empty target: nothing to remove, and the staging table becomes it
                    conn.execute(sql.delete_where(staging, skip))
            if not (swappable and self._swap_in(load, target_name, staging)):
                self._refuse_duplicate_keys(load, staging)
                primary_key = [c.destination_name for c in model.primary_key]
                if skip:
                    rows_deleted = conn.execute(plan_soft_delete(
                        target=target, staging=staging, primary_key=primary_key,
                        last_modified=model.last_modified.destination_name,
                        marker=marker.destination_name, marker_type=marker.data_type)).rowcount
                conn.execute(plan_upsert(
                    target=target, staging=staging,
                    columns=[c.destination_name for c in model.columns],
                    primary_key=primary_key,
                    last_modified=model.last_modified.destination_name,
                    append_only=model.is_append_only,  # a key already delivered is skipped
                    skip=skip,
                ))
            new_state = state.after_window(
                load.progress, batch_max_last_modified=max_lm, configured_start=load.configured_start
            )
            if load.into_refresh:
                conn.execute(sql.set_refresh_state(self.status_table), (new_state.to_json(), model.model_name))
            else:
                self._record_state(model, new_state, load.transfer_id)
        return WindowResult(rows, delta_rows, int(volume or 0), max_lm, new_state, rows_deleted)

    # -- the empty-target fast path -----------------------------------------------------------

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

    def _swap_in(self, load: WindowLoad, target_name: str, staging: str) -> bool:
        """Make the loaded staging table the target, in the current transaction: its primary key
        is built (a duplicate key is refused by name), the empty target dropped, the staging table
        renamed. False, with nothing changed, if the target is no longer empty or cannot be
        dropped (an object came to depend on it): the caller merges instead."""
        import psycopg

        model = load.model
        conn = self.conn
        target = qualified(self.schema, target_name)
        conn.execute(sql.lock_exclusive(target))
        if not self._is_empty(target):
            return False
        try:
            with conn.transaction():
                conn.execute(sql.add_primary_key(staging, [c.destination_name for c in model.primary_key]))
        except psycopg.errors.UniqueViolation:
            self._refuse_duplicate_keys(load, staging)
            raise  # not reached: the check above names the duplicate
        try:
            with conn.transaction():
                conn.execute(sql.drop_table(target, if_exists=False))
        except psycopg.errors.DependentObjectsStillExist:
            return False
        self._rename_into(staging, target_name)
        return True

    def _rename_into(self, table: str, name: str) -> None:
        """Rename ``table`` (in this schema) to ``name``, its primary key to ``<name>_pkey``."""
        target = qualified(self.schema, name)
        conn = self.conn
        conn.execute(sql.rename_table(table, name))
        (pkey,) = conn.execute(sql.PRIMARY_KEY_NAME, (target,)).fetchone()
        conn.execute(sql.rename_constraint(target, pkey, name + "_pkey"))

    def _ensure_status_row(self, model: ModelConfig) -> None:
        self.conn.execute(sql.ensure_status_row(self.status_table), (model.model_name,))

    def _lock_state(self, model: ModelConfig, column: str) -> ModelState:
        """The model's state, its status row locked until the transaction ends (one writer at a time)."""
        self._ensure_status_row(model)
        row = self.conn.execute(sql.read_state(self.status_table, column, for_update=True),
                                (model.model_name,)).fetchone()
        return ModelState.from_json(row[0] if row else None)

    @contextmanager
    def _translated_errors(self) -> Iterator[None]:
        import psycopg

        with self._missing_privileges():
            try:
                yield
            except psycopg.OperationalError as exc:
                connection = self.destination.connection
                raise ConnectionFailure(self.what, host=connection.host, port=connection.port,
                                        reason=str(exc).strip().splitlines()[0]) from None

    def _checked_batch(self, load: WindowLoad, staging: str,
                       state: ModelState) -> tuple[int, int, object, int, int]:
        """Rows, rows newer than the high watermark, max last-modified, size of the batch and its
        rows newly marked deleted (newer than the high watermark), in one scan; a NULL key or
        last-modified value is refused by name."""
        model = load.model
        rows, delta_rows, max_lm, volume, null_keys, null_lms, marked_rows = self.conn.execute(
            batch_summary_sql(model, staging),
            {"hw": None if state.high_watermark is None else model.change_column.value(state.high_watermark),
             "staging": staging},
        ).fetchone()
        if null_keys or null_lms:
            self._refuse_null_values(load, staging)
        return (rows, delta_rows, None if max_lm is None else model.change_column.moment(max_lm), volume,
                marked_rows)

    def _refuse_null_values(self, load: WindowLoad, staging: str) -> None:
        model = load.model
        keys = [c.destination_name for c in model.primary_key]
        for key in keys:
            row = self.conn.execute(sql.first_key_where_null(staging, keys, key)).fetchone()
            if row is not None:
                raise null_key_error(model, self.name, key, dict(zip(keys, row, strict=True)))
        lm_name = model.last_modified.destination_name
        row = self.conn.execute(sql.first_key_where_null(staging, keys, lm_name)).fetchone()
        if row is not None:
            raise null_last_modified_error(model, self.name, dict(zip(keys, row, strict=True)))

    def _refuse_duplicate_keys(self, load: WindowLoad, staging: str) -> None:
        model = load.model
        keys = [c.destination_name for c in model.primary_key]
        row = self.conn.execute(sql.first_duplicate_key(staging, keys)).fetchone()
        if row is not None:
            raise duplicate_key_error(model, self.name, dict(zip(keys, row, strict=False)), row[-1])

    def _record_state(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        self.conn.execute(
            sql.record_state(self.status_table),
            (state.watermark, state.high_watermark, state.to_json(), transfer_id, model.model_name),
        )

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """Hold the model's lock in the destination itself (a session advisory lock, released when
        the writer's connection closes, or when its process dies): two transfers of one model to
        one destination never interleave, however they were started (two ``transfer`` commands,
        ``materialize()`` in two processes), and the staging tables of the model left behind can
        only be a dead transfer's. A second transfer waits up to ``LOCK_WAIT_SECONDS``, then is
        refused, naming the first."""
        import psycopg

        key = model_lock_key(self.destination.connection.database, self.schema, model.model_name)
        if key in self._locked:
            return
        conn = self.conn
        conn.execute("SELECT set_config('application_name', %s, false)", (f"transfer_platform {transfer_id}"[:63],))
        try:
            # wait a little: a killed transfer's session ends a moment after its process
            with conn.transaction():
                conn.execute(sql.lock_timeout(LOCK_WAIT_SECONDS))
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        except psycopg.errors.LockNotAvailable:
            holder = conn.execute(
                sql.ADVISORY_LOCK_HOLDER,
                ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()
            who = (f"{holder[0] or 'a session'}, connected since {holder[1]:%Y-%m-%d %H:%M:%S}"
                   if holder else "a session that has just ended")
            raise TransferRunning(
                f"model '{model.model_name}' -> destination '{self.name}': another transfer of this "
                f"model to this destination is running ({who}); two transfers never write one "
                "table at once. Fix: wait for it to end, or cancel it (transfer-platform cancel "
                "TRANSFER_ID), then run this one again; transfers queued through Dagster wait for "
                "each other by themselves") from None
        self._locked.add(key)

    def _drop_stale_staging(self, model: ModelConfig) -> None:
        prefix = STAGING_PREFIX + staging_suffix(model.model_name, "")
        stale = self.conn.execute(sql.TABLES_STARTING_WITH, (self.schema, prefix)).fetchall()
        for (name,) in stale:
            self.conn.execute(sql.drop_table(qualified(self.schema, name)))
            log_phase("clean up", transfer_id="(a dead transfer)", destination=self.name,
                      model=model.model_name, staging_table=name, left_by_a_dead_transfer=True)
