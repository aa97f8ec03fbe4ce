"""PostgreSQL destination: a staged upsert (the order is ``destinations/skeleton.py``'s).

Per window: Spark writes the batch into an UNLOGGED staging table with the target's columns
(:mod:`.staging`); it is checked (no NULL key or last-modified value, no duplicate key); then one
transaction merges it on the primary key and records the model's row in ``_transfer_status``
with the new watermark (:mod:`.merge`); the staging table is dropped. A crash before COMMIT
leaves the target and the watermark as they were; the next transfer drops the orphaned staging
table in ``prepare``, under the model's advisory lock (:mod:`.locks`). A full refresh is built
aside and published in one transaction (:mod:`.refresh`); an incremental transfer brings the live
table's columns to the model's (:mod:`.schema`).

Every statement's text comes from :mod:`.sql`, planned and tested without a database; these
modules run them, in order, in their transactions, and turn what PostgreSQL refuses into errors
that name the fix (:mod:`.errors`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from transfer_platform.config.models import ModelConfig
from transfer_platform.connections import connect_postgres, jdbc_properties, postgres_jdbc_url
from transfer_platform.core.sql import qualified
from transfer_platform.destinations.base import staging_suffix
from transfer_platform.destinations.postgres import sql
from transfer_platform.destinations.postgres.errors import Errors, first_line
from transfer_platform.destinations.postgres.locks import Locks
from transfer_platform.destinations.postgres.merge import Merge
from transfer_platform.destinations.postgres.probe import Probing
from transfer_platform.destinations.postgres.refresh import Refresh
from transfer_platform.destinations.postgres.schema import Schema
from transfer_platform.destinations.postgres.staging import Staging
from transfer_platform.destinations.postgres.state import States
from transfer_platform.destinations.skeleton import Writer
from transfer_platform.errors import DataError
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.postgres import PostgresDestination

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import DataFrame, SparkSession


class PostgresWriter(Errors, States, Schema, Staging, Merge, Refresh, Locks, Probing, Writer):
    def __init__(self, destination: PostgresDestination, tuning: Tuning = DEFAULT) -> None:
        super().__init__(destination, tuning)
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

    def _preparing(self) -> AbstractContextManager[None]:
        return self._missing_privileges()

    # -- names --------------------------------------------------------------------------------

    def table(self, model: ModelConfig) -> str:
        return qualified(self.schema, model.model_name)

    def refresh_table_name(self, model: ModelConfig) -> str:
        return sql.REFRESH_PREFIX + staging_suffix(model.model_name, "").rstrip("_")

    def refresh_table(self, model: ModelConfig) -> str:
        return qualified(self.schema, self.refresh_table_name(model))

    @property
    def status_table(self) -> str:
        return qualified(self.schema, sql.STATUS_TABLE)

    # -- outside a transfer's windows ---------------------------------------------------------

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        """Remove the rows whose primary key and last-modified value ``frame`` holds (a row that
        changed since is left alone): staged like a batch (COPY from Spark's workers, so memory
        stays flat), then one ``DELETE ... USING`` in one transaction."""
        columns = [c.destination_name for c in model.primary_key] + [model.last_modified.destination_name]
        staging = qualified(self.schema, self.staging_table_name(model, transfer_id))
        with self._translated_errors():
            self.conn.execute(sql.drop_table(staging))
            self.conn.execute(sql.staging_like(staging, self.table(model), logged=False, columns=columns))
            try:
                self._stage(frame.select(*columns), staging)
                with self.conn.transaction():
                    return self.conn.execute(sql.delete_matching_sql(self.table(model), staging, columns)).rowcount
            finally:
                self.conn.execute(sql.drop_table(staging))

    def has_table(self, model: ModelConfig) -> bool:
        import psycopg

        try:
            return self.conn.execute(sql.TABLE_EXISTS, (self.table(model),)).fetchone()[0]
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
