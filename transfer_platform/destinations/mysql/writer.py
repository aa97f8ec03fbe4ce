"""MySQL / MariaDB destination: a staged upsert (the order is ``destinations/skeleton.py``'s).

Per window: the batch is loaded with ``LOAD DATA LOCAL INFILE`` into a staging table of the
model's columns (:mod:`.staging`, :mod:`.load`); it is checked (no NULL key or last-modified
value, no duplicate key, no date before 1000-01-01, no string key over 255 characters); then one
transaction merges it on the primary key (a staged delete + insert) and records the model's row
in ``_transfer_status`` with the new watermark (:mod:`.merge`); the staging table is dropped. A
full refresh is built aside and published by an atomic ``RENAME TABLE`` (:mod:`.refresh`); an
incremental transfer brings the live table's columns to the model's (:mod:`.schema`). The
model's lock is a ``GET_LOCK`` (:mod:`.locks`). Every table lives in ``connection.database``
(the recipient's database, which must exist); the session is in UTC (``time_zone = '+00:00'``)
and strict.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from transfer_platform.config.models import ModelConfig
from transfer_platform.connections import jdbc_properties, mysql_jdbc_url
from transfer_platform.destinations.base import staging_suffix
from transfer_platform.destinations.mysql import sql
from transfer_platform.destinations.mysql.errors import Errors, connect_kwargs, first_line
from transfer_platform.destinations.mysql.locks import Locks
from transfer_platform.destinations.mysql.merge import Merge
from transfer_platform.destinations.mysql.probe import Probing
from transfer_platform.destinations.mysql.refresh import Refresh
from transfer_platform.destinations.mysql.schema import Schema
from transfer_platform.destinations.mysql.staging import Staging
from transfer_platform.destinations.mysql.state import States
from transfer_platform.destinations.skeleton import Writer
from transfer_platform.errors import ConnectionFailure
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.mysql import MysqlDestination

if TYPE_CHECKING:
    import pymysql
    from pyspark.sql import DataFrame, SparkSession

CONNECT_FIX = ("check that the server is running and accepts connections, and the host, port, database "
               "(the recipient's, created beforehand), username and password variable in the configuration")


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


class MysqlWriter(Errors, States, Schema, Staging, Merge, Refresh, Locks, Probing, Writer):
    def __init__(self, destination: MysqlDestination, tuning: Tuning = DEFAULT) -> None:
        super().__init__(destination, tuning)
        self.database = destination.connection.database
        self.what = f"MySQL destination '{destination.name}'"
        self._conn: pymysql.Connection | None = None
        self._locked: set[str] = set()  # the models whose lock this writer's session holds

    # -- connection ---------------------------------------------------------------------------

    @property
    def conn(self) -> pymysql.Connection:
        if self._conn is None or not self._conn.open:
            self._conn = connect(self.destination, self.what)
            self._locked.clear()  # a new session holds no lock
        return self._conn

    def close(self) -> None:
        """Release the connection, and with it the models' locks (``GET_LOCK`` is the session's)."""
        if self._conn is not None:
            with suppress(Exception):  # already gone: its locks went with it
                self._conn.close()
            self._conn = None
        self._locked.clear()

    def check(self) -> None:
        with self._translated_errors():
            self._one("SELECT 1")

    @contextmanager
    def _preparing(self) -> Iterator[None]:
        with self._translated_errors():
            yield

    def _exec(self, statement: str, params: Any = None) -> int:
        with self.conn.cursor() as cursor:
            return cursor.execute(statement, params)

    def _one(self, statement: str, params: Any = None) -> tuple | None:
        with self.conn.cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchone()

    def _all(self, statement: str, params: Any = None) -> list[tuple]:
        with self.conn.cursor() as cursor:
            cursor.execute(statement, params)
            return list(cursor.fetchall())

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        conn = self.conn
        conn.begin()
        try:
            yield
        except BaseException:
            conn.rollback()
            raise
        conn.commit()

    # -- names --------------------------------------------------------------------------------

    def table(self, model: ModelConfig) -> str:
        return sql.qualified(self.database, model.model_name)

    def refresh_table_name(self, model: ModelConfig) -> str:
        return sql.REFRESH_PREFIX + staging_suffix(model.model_name, "").rstrip("_")

    def refresh_table(self, model: ModelConfig) -> str:
        return sql.qualified(self.database, self.refresh_table_name(model))

    def old_table_name(self, model: ModelConfig) -> str:
        return sql.OLD_PREFIX + staging_suffix(model.model_name, "").rstrip("_")

    @property
    def status_table(self) -> str:
        return sql.qualified(self.database, sql.STATUS_TABLE)

    # -- outside a transfer's windows ---------------------------------------------------------

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        """Remove the rows whose primary key and last-modified value ``frame`` holds (a row that
        changed since is left alone): staged like a batch, then one ``DELETE ... JOIN``."""
        chosen = [*model.primary_key, model.last_modified]
        columns = [c.destination_name for c in chosen]
        name = self.staging_table_name(model, transfer_id)
        staging = sql.qualified(self.database, name)
        with self._translated_errors():
            self._exec(sql.drop_table(staging))
            self._exec(sql.staging_ddl(staging, model, chosen))
            try:
                self._stage(frame.select(*columns), staging, model)
                with self._transaction():
                    return self._exec(sql.delete_matching(self.table(model), staging, columns))
            finally:
                self._exec(sql.drop_table(staging))

    def has_table(self, model: ModelConfig) -> bool:
        with self._translated_errors():
            return self._exists(model.model_name)

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
