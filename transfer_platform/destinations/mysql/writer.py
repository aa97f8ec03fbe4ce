"""MySQL / MariaDB destination: the SQL writer's algorithm (``destinations/sql/``) with
:class:`~.dialect.MysqlDialect`'s statements, and what MySQL does its own way:

- **the bulk load**: ``LOAD DATA LOCAL INFILE`` into a staging table of the model's columns, from
  Spark's Python workers or from this process (:mod:`.load`);
- **the rules of its types**: a date or timestamp before 1000-01-01, or a string key over 255
  characters, refused by name before anything is committed;
- **the merge**: a staged delete + insert in one transaction (only DML runs inside it: MySQL commits
  at any DDL); a key the target does not hold, staged twice, is refused by the target's own key;
- **a window into an empty target** (a backfill's, a full refresh's first), its empty-table load
  ``create-and-rename``: loaded in key order into a fresh keyed table that replaces the target, no
  merge (:meth:`MysqlWriter._start_empty_load`);
- **a full refresh's publish**: one atomic ``RENAME TABLE live TO _tp_old_<hash>, aside TO live``
  between two commits (the SQL writer's publish without transactional DDL), waiting at most
  ``Tuning.lock_wait_seconds`` for the live table's readers;
- **the model's lock**: a ``GET_LOCK`` held by the writer's session.

Every table lives in ``connection.database`` (the recipient's database, which must exist); the
session is in UTC (``time_zone = '+00:00'``) and strict.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from functools import partial
from typing import TYPE_CHECKING

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import (
    duplicate_key_error,
    null_key_error,
    offending_key,
)
from transfer_platform.destinations.mysql import dialect as sql
from transfer_platform.destinations.mysql.dialect import STATUS_TABLE
from transfer_platform.destinations.mysql.errors import (
    DENIED,
    connect_kwargs,
    first_line,
    missing_privilege,
    translated_errors,
)
from transfer_platform.destinations.mysql.load import LoadRefused, load_batches, load_partition
from transfer_platform.destinations.mysql.probe import probe_destination
from transfer_platform.destinations.skeleton import next_state
from transfer_platform.destinations.sql import rename_publish
from transfer_platform.destinations.sql.session import PymysqlSession
from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable
from transfer_platform.errors import (
    ConnectionFailure,
    DataError,
    DuplicateKey,
    TransferRunning,
    transfer_running,
)
from transfer_platform.phases import log_phase
from transfer_platform.runtime.connections import (
    jdbc_properties,
    mysql_jdbc_url,
    spark_error_reason,
)
from transfer_platform.storage.locks import Lock, Locks
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.mysql import MysqlDestination

if TYPE_CHECKING:
    import pyarrow as pa
    import pymysql
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.destinations.base import WindowLoad
    from transfer_platform.probes import Check

CONNECT_FIX = ("check that the server is running and accepts connections, and the host, port, database "
               "(the recipient's, created beforehand), username and password variable in the configuration")
#: ER_DUP_ENTRY, ER_LOCK_WAIT_TIMEOUT
DUPLICATE_ENTRY, LOCK_WAIT_TIMEOUT = 1062, 1205
#: what LOAD DATA LOCAL reports (as a warning) when a row breaks the fresh table's key: a key
#: twice, a NULL key column, a string key longer than its column
_DUPLICATE = re.compile(r"Duplicate entry '(.*)' for key '?PRIMARY'?")
_NULL_KEY = re.compile(r"NULL supplied to NOT NULL column '([^']+)'|Column '([^']+)' cannot be null")
_TRUNCATED = re.compile(r"Data (?:too long|truncated) for column '([^']+)'")


def connect(destination: MysqlDestination, what: str) -> pymysql.Connection:
    """A PyMySQL connection in UTC, strict, LOCAL INFILE allowed; ``ConnectionFailure`` naming
    host and port (never the password) if it fails."""
    import pymysql

    connection = destination.connection
    try:
        return pymysql.connect(**connect_kwargs(connection, what=f"destinations.{destination.name}"))
    except pymysql.err.OperationalError as exc:
        raise ConnectionFailure(what, host=connection.host, port=connection.port, reason=first_line(exc),
                                fix=CONNECT_FIX) from None


class NamedLock(Lock):
    """A model's lock as MySQL's ``GET_LOCK(name)``, the session's: released when the writer's
    connection closes or its process dies (never stale); the server waits for it."""

    poll_seconds = None

    def __init__(self, session: PymysqlSession, name: str) -> None:
        self.session, self.name = session, name

    def take(self, within: float) -> bool:
        return self.session.one(("SELECT GET_LOCK(%s, %s)", (self.name, within)))[0] == 1

    def holder(self) -> str:
        held = self.session.one((sql.LOCK_HOLDER, (self.name,)))
        return f"session of {held[0]}@{held[1]}, running for {held[2]} s" if held else "another session"


class MysqlWriter(SqlWriter):
    DIALECT = sql.MysqlDialect()

    def __init__(self, destination: MysqlDestination, tuning: Tuning = DEFAULT) -> None:
        super().__init__(destination, tuning, container=destination.connection.database,
                         what=f"MySQL destination '{destination.name}'")
        self.database = self.container
        self._conn: pymysql.Connection | None = None
        self._locked = Locks()  # the models whose lock this writer's session holds
        self._fresh: set[str] = set()  # the fresh tables being loaded (see _start_empty_load)

    # -- connection ---------------------------------------------------------------------------

    @property
    def conn(self) -> pymysql.Connection:
        if self._conn is None or not self._conn.open:
            self._conn = connect(self.destination, self.what)
            self._locked.clear()  # a new session holds no lock
        return self._conn

    @property
    def session(self) -> PymysqlSession:
        return PymysqlSession(self.conn)

    def close(self) -> None:
        """Release the connection, and with it the models' locks (``GET_LOCK`` is the session's)."""
        if self._conn is not None:
            with suppress(Exception):  # already gone: its locks went with it
                self._conn.close()
            self._conn = None
        self._locked.clear()

    def _translated_errors(self) -> AbstractContextManager[None]:
        return translated_errors(self.destination, self.what)

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """``committed_state`` reads in one READ ONLY transaction (a consistent snapshot)."""
        with self._translated_errors():
            self.session.execute("START TRANSACTION READ ONLY")
            try:
                yield
            finally:
                self.conn.rollback()

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """Two transfers (or sweeps) of one model to one destination never interleave, however
        they were started; a second one waits up to ``Tuning.lock_wait_seconds``, then is refused."""
        lock = NamedLock(self.session, sql.model_lock_name(self.database, model.model_name))
        with self._translated_errors():
            self._locked.hold(model.model_name, lock, destination=self.name,
                              wait_seconds=self.tuning.lock_wait_seconds)

    # -- the bulk load: LOAD DATA LOCAL INFILE ----------------------------------------------------

    def _load_frame(self, frame: DataFrame, staging: str, model: ModelConfig) -> None:
        """Spark hands each partition to a Python worker as Arrow batches (``mapInArrow``: memory
        stays flat), which loads them with LOAD DATA LOCAL INFILE in a connection of its own; at
        most ``max_concurrent_queries_per_transfer`` partitions load at once."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        connection = self.destination.connection
        load = partial(load_partition, connect_kwargs(connection, what=f"destinations.{self.name}"),
                       sql.load_data(staging, "{path}", frame.columns))
        parts = frame.coalesce(self.destination.max_concurrent_queries_per_transfer)
        if staging in self._fresh:  # InnoDB appends rows that arrive in key order (see _start_empty_load)
            parts = parts.sortWithinPartitions(*[c.destination_name for c in model.primary_key])
        try:
            parts.mapInArrow(load, "rows long").collect()
        except (Py4JJavaError, PySparkException) as exc:
            reason = spark_error_reason(exc)
            if "Can't connect" in reason or "Lost connection" in reason:
                raise ConnectionFailure(self.what, host=connection.host, port=connection.port,
                                        reason=reason) from None
            if "command denied" in reason or "access denied" in reason.lower():
                raise missing_privilege(self.destination, self.what, RuntimeError(reason)) from None
            raise self._load_error(model, reason.removeprefix("LOAD DATA into the staging table failed: "),
                                   staging) from None

    def _load_arrow(self, batch: pa.Table, staging: str, load: WindowLoad) -> None:
        import pymysql

        if staging in self._fresh:
            batch = batch.sort_by([(c.destination_name, "ascending") for c in load.model.primary_key])
        with self._translated_errors():
            try:
                load_batches(self.conn, sql.load_data(staging, "{path}", batch.column_names), batch.to_batches())
            except LoadRefused as exc:
                raise self._load_error(load.model, str(exc), staging) from None
            except (pymysql.err.DataError, pymysql.err.IntegrityError, pymysql.err.InternalError) as exc:
                raise self._load_error(load.model, first_line(exc), staging) from None
            except pymysql.err.OperationalError as exc:
                if exc.args and exc.args[0] in DENIED or (exc.args and exc.args[0] >= 2000):
                    raise
                raise self._load_error(load.model, first_line(exc), staging) from None

    def _load_error(self, model: ModelConfig, reason: str, staging: str) -> DataError:
        """What the load refused; a row that broke a fresh table's primary key (only a fresh
        table has one) is refused by name as the staging checks name it."""
        keys = [c.destination_name for c in model.primary_key]
        found = _DUPLICATE.search(reason)
        if found:
            with self._translated_errors():
                row = self.session.one((sql.key_by_text(staging, keys), (found.group(1),)))
            values = dict(zip(keys, row, strict=True)) if row else {keys[0]: found.group(1)} if len(keys) == 1 else None
            shown = offending_key(model, values) if values else f"{'-'.join(keys)}='{found.group(1)}'"
            return DuplicateKey(
                f"duplicate primary key in one batch: {shown} appears more than once",
                model=model.model_name, destination=self.name,
                fix="make the primary key unique per tenant in the source, or mark the right columns "
                    "with is_primary_key",
                key_values={k: (values or {}).get(k) for k in keys})
        found = _NULL_KEY.search(reason)
        if found and (found.group(1) or found.group(2)) in keys:
            column = found.group(1) or found.group(2)
            return null_key_error(model, self.name, column, {column: None})
        found = _TRUNCATED.search(reason)
        string_keys = [c.destination_name for c in model.primary_key if c.data_type == "string"]
        if found and found.group(1) in string_keys:
            return DataError(
                f"a string primary key value ({found.group(1)}) is longer than {sql.KEY_STRING_LENGTH} "
                f"characters: MySQL key columns are {sql.KEY_STRING_TYPE}; nothing was written",
                model=model.model_name, destination=self.name,
                fix="key the model on shorter columns (a hash of the long value, say)")
        return DataError(f"LOAD DATA into the staging table failed: {reason}", model=model.model_name,
                         destination=self.name, fix="check that each column's data_type matches the source values")

    # -- the rules of MySQL's types, its duplicate keys ---------------------------------------------

    def _refuse_values(self, load: WindowLoad, staging: StagingTable) -> None:
        """A date or timestamp before 1000-01-01 (MySQL's DATETIME and DATE hold 1000-01-01 to
        9999-12-31), or a string key longer than its VARCHAR column: refused by name."""
        model = load.model
        keys = [c.destination_name for c in model.primary_key]
        dated = [c.destination_name for c in model.columns if c.data_type in ("timestamp", "date")]
        row = self.session.one(sql.first_out_of_range(staging.table, keys, dated)) if dated else None
        if row is not None:
            values = dict(zip(dated, row[len(keys):], strict=True))
            column = next(c for c, v in values.items() if v is not None and str(v) < sql.EARLIEST)
            raise DataError(
                f"column '{column}' holds {values[column]}, before {sql.EARLIEST}, at key "
                f"{offending_key(model, dict(zip(keys, row, strict=False)))}: MySQL's DATETIME and DATE "
                f"hold {sql.EARLIEST} to 9999-12-31; nothing was written",
                model=model.model_name, destination=self.name,
                fix=f"correct the value in the source, or leave {column} out of the model")
        long_keys = [c.destination_name for c in model.primary_key if c.data_type == "string"]
        row = self.session.one(sql.first_long_key(staging.table, keys, long_keys)) if long_keys else None
        if row is not None:
            raise DataError(
                f"a string primary key value is longer than {sql.KEY_STRING_LENGTH} characters (key "
                f"starting {offending_key(model, dict(zip(keys, row, strict=True)))}): MySQL key columns "
                f"are {sql.KEY_STRING_TYPE}; nothing was written",
                model=model.model_name, destination=self.name,
                fix="key the model on shorter columns (a hash of the long value, say)")

    def _refuse_duplicate_keys(self, load: WindowLoad, staging: StagingTable) -> None:
        """A key staged twice among the keys the target holds (a join on its primary key, cheap);
        a key it does not hold, staged twice, makes the merge's insert fail on the primary key,
        which then runs the full check (:meth:`_merge`)."""
        model = load.model
        keys = [c.destination_name for c in model.primary_key]
        row = self.session.one(sql.first_duplicate_held_key(staging.table, staging.target, keys))
        if row is not None:
            raise duplicate_key_error(model, self.name, dict(zip(keys, row, strict=False)), row[-1])

    def _merge(self, load: WindowLoad, staging: StagingTable) -> int:
        import pymysql

        try:
            return super()._merge(load, staging)
        except pymysql.err.IntegrityError as exc:
            if exc.args and exc.args[0] == DUPLICATE_ENTRY:  # a new key staged twice: named, rolled back
                super()._refuse_duplicate_keys(load, staging)
            raise

    # -- the empty-table load: create-and-rename (a fresh keyed table replaces the target) ----------

    def _start_empty_load(self, load: WindowLoad, staging: StagingTable) -> bool:
        """A window into an empty target (a backfill's, a full refresh's first) is loaded straight
        into a fresh table of the target's definition, primary key included (``CREATE TABLE ...
        LIKE``; named as a staging table, so a dead transfer's is dropped by the next one's
        clean-up), which then replaces the target: no merge, each row written once. Any other
        window is staged and merged.

        The rows are loaded in key order (each loading connection's share sorted on the key):
        InnoDB then appends to its primary key. Measured on this machine's MariaDB, 1M rows: in key
        order 12 CPU-seconds of the server, in random order 58, into a table without a key with the
        key added after 20-22; staged and merged (the path of any other window) 46, 89 in random
        order (docs/destinations.md)."""
        self._fresh.discard(staging.table)
        if load.into_refresh:  # a full refresh's table aside before its first window is committed
            fits = self.read_state(load.model, "refresh_state").watermark is None
        else:  # a live table without triggers or foreign keys
            fits = not self.session.one((sql.DEPENDENTS, (self.database, staging.target_name) * 3))[0]
        if fits:
            self.session.execute(self.dialect.drop_table(staging.table))
            self.session.execute(sql.create_like(staging.table, staging.target))
            self._fresh.add(staging.table)
        return fits

    def _remove_staging(self, staging: StagingTable, load: WindowLoad) -> None:
        self._fresh.discard(staging.table)
        super()._remove_staging(staging, load)

    def _still_empty(self, staging: StagingTable) -> bool:
        return not self._has_rows(staging.target)

    def _publish_empty_load(self, staging: StagingTable, load: WindowLoad) -> ModelState:
        """The fresh table replaces its target by one atomic ``RENAME TABLE`` recorded around by
        two commits of the status row (:mod:`..sql.rename_publish`: a transfer killed between them
        is finished by the next); the window's state moves only with it."""
        model = load.model
        column = "refresh_state" if load.into_refresh else "state"
        with self._atomically(load):  # the status row made if missing (the publish updates it)
            before = self._lock_state(model, column)
        new_state = next_state(before, load, staging.max_last_modified)
        if load.into_refresh:  # the aside table is no reader's: replaced, then its progress recorded
            old_name = self.old_table_name(model)
            self.session.execute(self.dialect.drop_table(self.dialect.qualified(self.database, old_name)))
            self._rename(model, [(staging.target, old_name), (staging.table, staging.target_name)])
            self.session.execute(self.dialect.drop_table(self.dialect.qualified(self.database, old_name)))
            with self._atomically(load):
                self._lock_state(model, column)
                self._set_state(model, "refresh_state", new_state)
        else:  # the live table: published as a full refresh is, the fresh table as the one aside
            self.session.execute(self.dialect.drop_table(self.refresh_table(model)))
            self._rename(model, [(staging.table, self.refresh_table_name(model))])
            try:
                rename_publish.publish(self, model, new_state, load.transfer_id)
            except TransferRunning:
                raise transfer_running(
                    model.model_name, self.name, f"the window was loaded into a new table but could not replace "
                    f"the empty {self.table(model)}: other sessions kept it in use for "
                    f"{max(1, round(self.tuning.lock_wait_seconds))} s. Nothing changed: the table and the watermark "
                    "are as they were", "run the transfer again once the queries or open transactions on the table "
                    "have ended") from None
        return new_state

    def _clean_staging(self, model: ModelConfig) -> None:
        """Also what a dead fresh-table window left: a table aside no refresh owns (its window
        died before its publish), and a refresh's table aside holding rows though no window of
        it was committed (its first window died between its rename and its commit), emptied."""
        super()._clean_staging(model)
        aside = self.refresh_table_name(model)
        with self._translated_errors():
            if not (self._exists(STATUS_TABLE) and self._exists(aside)):
                return
            row = self._status_row(model)
            refresh, published = (None, None) if row is None else (row[1], row[2])
            if published is not None:
                return
            if refresh is None:
                self.session.execute(self.dialect.drop_table(self.refresh_table(model)))
            elif (ModelState.from_json(refresh).watermark is None
                  and self._has_rows(self.refresh_table(model))):
                self.session.execute(self.dialect.drop_table(self.refresh_table(model)))
                self.session.execute(self.dialect.target_ddl(self.refresh_table(model), model))
            else:
                return
        log_phase("clean up", transfer_id="(a dead transfer)", destination=self.name, model=model.model_name,
                  staging_table=aside, left_by_a_dead_transfer=True)

    # -- a full refresh's publish -------------------------------------------------------------------

    def _rename(self, model: ModelConfig, pairs: list[tuple[str, str]]) -> None:
        """One ``RENAME TABLE``, waiting at most ``Tuning.lock_wait_seconds`` for the live table's
        readers (their open transactions hold its metadata lock); refused after that, nothing
        changed: readers still see the old table and the refresh built aside is kept."""
        import pymysql

        wait = max(1, round(self.tuning.lock_wait_seconds))
        self.session.execute(f"SET SESSION lock_wait_timeout = {wait}")
        try:
            super()._rename(model, pairs)
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] == LOCK_WAIT_TIMEOUT:
                raise transfer_running(
                    model.model_name, self.name, f"the full refresh is complete but was not published: other "
                    f"sessions kept {self.table(model)} in use for {wait} s (RENAME TABLE needs it alone for a "
                    "moment). Nothing changed: readers still see the old table, and the refresh built aside is kept",
                    "run the transfer again once the long queries or open transactions on the table have ended; it "
                    "publishes the refresh") from None
            raise
        finally:
            self.session.execute("SET SESSION lock_wait_timeout = DEFAULT")

    # -- outside a transfer's windows ---------------------------------------------------------

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        connection = self.destination.connection
        return (
            spark.read.format("jdbc")
            .options(url=mysql_jdbc_url(connection), driver="org.mariadb.jdbc.Driver",
                     dbtable=self.table(model), fetchsize="10000",
                     sessionInitStatement="SET time_zone = '+00:00'",
                     **jdbc_properties(connection, f"destinations.{self.name}.connection.password"))
            .load()
        )

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        return probe_destination(self, models, target)
