"""MySQL / MariaDB destination: the SQL writer (``destinations/sql/``) with :mod:`.dialect`'s
statements, the bulk load of :mod:`.load`, and what MySQL does its own way."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING

from transfer_platform import errors
from transfer_platform.config.models import ModelConfig
from transfer_platform.destinations.base import duplicate_key_error, null_key_error, offending_key
from transfer_platform.destinations.mysql import dialect as sql
from transfer_platform.destinations.mysql import load as bulk
from transfer_platform.destinations.mysql.load import load_batches
from transfer_platform.destinations.sql import rename_publish
from transfer_platform.destinations.sql.session import PymysqlSession
from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable
from transfer_platform.probes import ProbePlan, Step
from transfer_platform.runtime import connections
from transfer_platform.storage.locks import NamedLock
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.mysql import MysqlDestination

if TYPE_CHECKING:
    import pyarrow as pa
    import pymysql
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.destinations.base import WindowLoad

#: every privilege the loader needs, on its own database only (docs/permissions.md)
LOADER_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER")
#: the server's "denied" codes (table, column, database, privilege, routine), ER_DUP_ENTRY, ER_LOCK_WAIT_TIMEOUT
DENIED, DUPLICATE_ENTRY, LOCK_WAIT_TIMEOUT = {1142, 1143, 1044, 1227, 1370}, 1062, 1205
CONNECT_FIX = ("check that the server is running and accepts connections, and the host, port, database "
               "(the recipient's, created beforehand), username and password variable in the configuration")
_COMMAND = re.compile(r"^(\w+(?: \w+)?) command denied", re.IGNORECASE)
#: LOAD DATA LOCAL's warnings when a row breaks the fresh table's key: a key twice, a NULL, a key too long
_DUPLICATE = re.compile(r"Duplicate entry '(.*)' for key '?PRIMARY'?")
_NULL_KEY = re.compile(r"NULL supplied to NOT NULL column '([^']+)'|Column '([^']+)' cannot be null")
_TRUNCATED = re.compile(r"Data (?:too long|truncated) for column '([^']+)'")
_LOAD_FAILED = "LOAD DATA into the staging table failed: "


def code(exc: BaseException) -> int | None:
    """A PyMySQL error's number (a client's, such as a lost connection, 2000 and above)."""
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else None


class MysqlWriter(SqlWriter):
    DIALECT = sql.MysqlDialect()
    LOCKS_END_WITH_SESSION = True  # GET_LOCK

    def __init__(self, destination: MysqlDestination, tuning: Tuning = DEFAULT) -> None:
        super().__init__(destination, tuning, container=destination.connection.database,
                         what=f"MySQL destination '{destination.name}'")
        self._fresh: set[str] = set()  # the fresh tables being loaded (see _start_empty_load)

    # -- the connection: UTC, strict, LOCAL INFILE allowed; GET_LOCK and what the server refuses --

    def connect_kwargs(self) -> dict:
        return connections.mysql_connect_kwargs(self.destination.connection, what=f"destinations.{self.name}",
                                                local_infile=True, init_command=sql.SESSION_SETUP)

    @property
    def conn(self) -> pymysql.Connection:
        import pymysql

        if self._conn is None or not self._conn.open:
            try:
                self._conn = pymysql.connect(**self.connect_kwargs())
            except pymysql.err.OperationalError as exc:
                raise self._lost(bulk.first_line(exc), fix=CONNECT_FIX) from None
            self._locked.clear()  # a new session holds no lock
        return self._conn

    @property
    def session(self) -> PymysqlSession:
        return PymysqlSession(self.conn)

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        lock = NamedLock(self.session, sql.model_lock_name(self.container, model.model_name))
        with self._translated_errors():
            self._locked.hold(model.model_name, lock, destination=self.name, wait_seconds=self.tuning.lock_wait_seconds)

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """``committed_state`` reads in one READ ONLY transaction (a consistent snapshot)."""
        with self._translated_errors():
            self.session.execute("START TRANSACTION READ ONLY")
            try:
                yield
            finally:
                self.conn.rollback()

    @contextmanager
    def _translated_errors(self) -> Iterator[None]:
        import pymysql

        try:
            yield
        except pymysql.err.MySQLError as exc:
            if code(exc) in DENIED:
                raise self._missing_privilege(bulk.first_line(exc)) from None
            if isinstance(exc, pymysql.err.OperationalError) and (code(exc) or 0) >= 2000:
                raise self._lost(bulk.first_line(exc)) from None
            raise

    def _grant(self, privileges: tuple[str, ...]) -> str:
        c = self.destination.connection
        return f"GRANT {', '.join(privileges)} ON {sql.q(c.database)}.* TO '{c.username.replace(chr(39), chr(39) * 2)}'@'%'"

    def _missing_privilege(self, reason: str) -> errors.MissingPrivilege:
        found = _COMMAND.search(reason)
        needed = (found.group(1).upper(),) if found and found.group(1).upper() in LOADER_PRIVILEGES else LOADER_PRIVILEGES
        return errors.MissingPrivilege(self.what, role=self.destination.connection.username, reason=reason, grant=(
            f"{self._grant(needed)} (a loader needs {', '.join(LOADER_PRIVILEGES)} on its database "
            f"{self.container!r}, nothing else)"))

    def _lost(self, reason: str, fix: str = "") -> errors.ConnectionFailure:
        c = self.destination.connection
        return errors.ConnectionFailure(self.what, host=c.host, port=c.port, reason=reason, fix=fix)

    # -- the bulk load: LOAD DATA LOCAL INFILE ----------------------------------------------------

    def _load_frame(self, frame: DataFrame, staging: str, model: ModelConfig) -> None:
        """Each partition loaded by its Spark Python worker (``mapInArrow``: memory stays flat)."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        load = partial(bulk.load_partition, self.connect_kwargs(), sql.load_data(staging, "{path}", frame.columns))
        parts = frame.coalesce(self.destination.max_concurrent_queries_per_transfer)
        if staging in self._fresh:  # InnoDB appends rows that arrive in key order (see _start_empty_load)
            parts = parts.sortWithinPartitions(*[c.destination_name for c in model.primary_key])
        try:
            parts.mapInArrow(load, "rows long").collect()
        except (Py4JJavaError, PySparkException) as exc:
            reason = connections.spark_error_reason(exc)
            if "Can't connect" in reason or "Lost connection" in reason:
                raise self._lost(reason) from None
            if "command denied" in reason or "access denied" in reason.lower():
                raise self._missing_privilege(reason) from None
            raise self._load_error(model, reason.removeprefix(_LOAD_FAILED), staging) from None

    def _load_arrow(self, batch: pa.Table, staging: str, load: WindowLoad) -> None:
        import pymysql

        if staging in self._fresh:
            batch = batch.sort_by([(c.destination_name, "ascending") for c in load.model.primary_key])
        with self._translated_errors():
            try:
                load_batches(self.conn, sql.load_data(staging, "{path}", batch.column_names), batch.to_batches())
            except (bulk.LoadRefused, pymysql.err.DataError, pymysql.err.IntegrityError,
                    pymysql.err.InternalError, pymysql.err.OperationalError) as exc:
                if code(exc) in DENIED or (code(exc) or 0) >= 2000:  # told by _translated_errors
                    raise
                raise self._load_error(load.model, bulk.first_line(exc), staging) from None

    def _load_error(self, model: ModelConfig, reason: str, staging: str) -> errors.DataError:
        """What the load refused: a row breaking a fresh table's key named as the staging checks name it."""
        keys = [c.destination_name for c in model.primary_key]
        if found := _DUPLICATE.search(reason):
            with self._translated_errors():
                row = self.session.one((self.dialect.key_by_text(staging, keys), (found.group(1),)))
            values = dict(zip(keys, row, strict=True)) if row else {keys[0]: found.group(1)} if len(keys) == 1 else None
            shown = offending_key(model, values) if values else f"{'-'.join(keys)}='{found.group(1)}'"
            return errors.DuplicateKey(
                f"duplicate primary key in one batch: {shown} appears more than once", model=model.model_name,
                destination=self.name, key_values={k: (values or {}).get(k) for k in keys},
                fix="make the primary key unique per tenant in the source, or mark the right columns with "
                    "is_primary_key")
        if (found := _NULL_KEY.search(reason)) and (column := found.group(1) or found.group(2)) in keys:
            return null_key_error(model, self.name, column, {column: None})
        if (found := _TRUNCATED.search(reason)) and found.group(1) in (c.destination_name for c in model.primary_key
                                                                       if c.data_type == "string"):
            return self._long_key(model, f" ({found.group(1)})", "")
        return errors.DataError(f"{_LOAD_FAILED}{reason}", model=model.model_name, destination=self.name,
                                fix="check that each column's data_type matches the source values")

    # -- the rules of MySQL's types, its duplicate keys ---------------------------------------------

    def _long_key(self, model: ModelConfig, value: str, key: str) -> errors.DataError:
        return errors.DataError(
            f"a string primary key value{value} is longer than {sql.KEY_STRING_LENGTH} characters{key}: MySQL "
            f"key columns are {sql.KEY_STRING_TYPE}; nothing was written", model=model.model_name,
            destination=self.name, fix="key the model on shorter columns (a hash of the long value, say)")

    def _refuse_values(self, load: WindowLoad, staging: StagingTable) -> None:
        """A date before 1000-01-01 (DATETIME and DATE hold 1000-01-01 to 9999-12-31), a key too long."""
        model = load.model
        keys = [c.destination_name for c in model.primary_key]
        dated = [c.destination_name for c in model.columns if c.data_type in ("timestamp", "date")]
        row = self.session.one(self.dialect.first_out_of_range(staging.table, keys, dated)) if dated else None
        if row is not None:
            values = dict(zip(dated, row[len(keys):], strict=True))
            column = next(c for c, v in values.items() if v is not None and str(v) < sql.EARLIEST)
            raise errors.DataError(
                f"column '{column}' holds {values[column]}, before {sql.EARLIEST}, at key "
                f"{offending_key(model, dict(zip(keys, row, strict=False)))}: MySQL's DATETIME and DATE "
                f"hold {sql.EARLIEST} to 9999-12-31; nothing was written", model=model.model_name,
                destination=self.name, fix=f"correct the value in the source, or leave {column} out of the model")
        string_keys = [c.destination_name for c in model.primary_key if c.data_type == "string"]
        row = self.session.one(self.dialect.first_long_key(staging.table, keys, string_keys)) if string_keys else None
        if row is not None:
            raise self._long_key(model, "", f" (key starting {offending_key(model, dict(zip(keys, row, strict=True)))})")

    def _refuse_duplicate_keys(self, load: WindowLoad, staging: StagingTable) -> None:
        """Only the keys the target holds (a join on its primary key, cheap): a new key staged
        twice fails the merge's insert on the primary key, which then runs the full check."""
        keys = [c.destination_name for c in load.model.primary_key]
        row = self.session.one(self.dialect.first_duplicate_held_key(staging.table, staging.target, keys))
        if row is not None:
            raise duplicate_key_error(load.model, self.name, dict(zip(keys, row, strict=False)), row[-1])

    def _merge(self, load: WindowLoad, staging: StagingTable) -> int:
        import pymysql

        try:
            return super()._merge(load, staging)
        except pymysql.err.IntegrityError as exc:
            if code(exc) == DUPLICATE_ENTRY:  # a new key staged twice: named, rolled back
                super()._refuse_duplicate_keys(load, staging)
            raise

    # -- the empty-table load: create-and-rename (rename_publish's), a fresh keyed table replacing the target --

    def _start_empty_load(self, load: WindowLoad, staging: StagingTable) -> bool:
        """Its rows are then loaded in key order: InnoDB appends to its key (measured on MariaDB, 1M
        rows, the server's CPU-seconds: 12 in key order, 58 in random order, 20-22 into a table
        without a key with the key added after; staged and merged 46, 89 in random order)."""
        self._fresh.discard(staging.table)
        if fits := rename_publish.start_fresh(self, load, staging):
            self._fresh.add(staging.table)
        return fits

    def _still_empty(self, staging: StagingTable) -> bool:
        return not self._has_rows(staging.target)

    _publish_empty_load = rename_publish.publish_fresh

    def _clean_staging(self, model: ModelConfig) -> None:
        super()._clean_staging(model)
        rename_publish.clean_fresh(self, model)

    def _rename(self, model: ModelConfig, pairs: list[tuple[str, str]]) -> None:
        """One ``RENAME TABLE``, waiting at most ``Tuning.lock_wait_seconds`` for the live table's
        readers (their open transactions hold its metadata lock), then refused, nothing changed."""
        import pymysql

        wait = max(1, round(self.tuning.lock_wait_seconds))
        self.session.execute(f"SET SESSION lock_wait_timeout = {wait}")
        try:
            super()._rename(model, pairs)
        except pymysql.err.OperationalError as exc:
            if code(exc) == LOCK_WAIT_TIMEOUT:
                raise errors.transfer_running(
                    model.model_name, self.name, f"the full refresh is complete but was not published: other "
                    f"sessions kept {self.table(model)} in use for {wait} s (RENAME TABLE needs it alone for a "
                    "moment). Nothing changed: readers still see the old table, and the refresh built aside is kept",
                    "run the transfer again once the long queries or open transactions on the table have ended; it "
                    "publishes the refresh") from None
            raise
        finally:
            self.session.execute("SET SESSION lock_wait_timeout = DEFAULT")

    # -- outside a transfer's windows -------------------------------------------------------------

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        c = self.destination.connection
        return spark.read.format("jdbc").options(
            url=connections.mysql_jdbc_url(c), driver="org.mariadb.jdbc.Driver", dbtable=self.table(model),
            fetchsize="10000", sessionInitStatement="SET time_zone = '+00:00'",
            **connections.jdbc_properties(c, f"destinations.{self.name}.connection.password")).load()

    def _probe_plan(self, models: list[ModelConfig], name: str) -> ProbePlan:
        """Each step a transfer takes on probe tables; a refused one names its grant."""
        import pyarrow as pa
        import pymysql

        c = self.destination.connection
        table, staging, renamed, loaded = (sql.qualified(self.container, name + s) for s in ("", "_s", "_r", "_l"))

        def grant(*privileges: str) -> Callable[[Exception], str]:
            return lambda exc: (self._grant(privileges) if code(exc) in DENIED
                                else "check the server's log; the loader's grants are in the docs")

        steps = [
            Step("create tables (model, status and staging tables)", grant("CREATE"),
                 [f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v LONGTEXT) {sql.TABLE_OPTIONS}",
                  f"CREATE TABLE {staging} (id BIGINT NULL, v LONGTEXT NULL) {sql.TABLE_OPTIONS}"]),
            Step("insert, read, update and delete rows (merge, state)", grant("INSERT", "SELECT", "UPDATE", "DELETE"),
                 [f"INSERT INTO {staging} VALUES (1, 'a')", f"INSERT INTO {table} SELECT * FROM {staging}",
                  f"UPDATE {table} SET v = 'b'", f"DELETE t FROM {table} AS t JOIN {staging} AS s ON t.id = s.id"]),
            Step("add and drop columns (schema evolution)", grant("ALTER"),
                 [f"ALTER TABLE {table} ADD COLUMN w LONGTEXT NULL", f"ALTER TABLE {table} DROP COLUMN w"]),
            Step("rename tables (a full refresh's publish)", grant("ALTER", "DROP", "CREATE", "INSERT"),
                 self.dialect.rename_tables(self.container, [(table, name + "_r")])),
            Step("drop tables (staging, full refresh)", grant("DROP"),
                 [self.dialect.drop_table(renamed, if_exists=False), self.dialect.drop_table(staging, if_exists=False)]),
            Step("load rows with LOAD DATA LOCAL INFILE (staging)", "enable it on the server (SET GLOBAL local_infile = "
                 "1, or local_infile=ON in its configuration); the loader needs no FILE privilege for it",
                 [f"CREATE TABLE {loaded} (id BIGINT NULL) {sql.TABLE_OPTIONS}", lambda: load_batches(
                     self.conn, sql.load_data(loaded, "{path}", ["id"]),
                     pa.table({"id": pa.array([1], pa.int64())}).to_batches())])]
        return ProbePlan(f"log in to database {c.database!r} as {c.username!r}", lambda: self.conn,
                         "check username, database (it must exist) and the password's environment variable", steps,
                         pymysql.err.MySQLError, bulk.first_line, endpoint=(c.host, c.port),
                         cleanup=[self.dialect.drop_table(t) for t in (table, staging, renamed, loaded)])
