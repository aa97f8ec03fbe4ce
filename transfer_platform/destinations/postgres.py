"""PostgreSQL destination: a staged upsert.

Per window: Spark writes the batch into an UNLOGGED staging table shaped like the target; then one
transaction checks the batch (no NULL last-modified value, no duplicate key), merges it on the
primary key (never replacing a row by an older one), records the model's row in
``_transfer_status`` with the new watermark, and drops the staging table. A crash before COMMIT
leaves the target and the watermark as they were; the next transfer drops the orphaned staging
table in :meth:`PostgresWriter.prepare`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.config.models import ModelConfig, PostgresDestination
from transfer_platform.connections import (
    connect_postgres,
    jdbc_properties,
    postgres_jdbc_url,
    spark_error_reason,
)
from transfer_platform.core.sql import plan_upsert, qualified, quote_ident
from transfer_platform.core.types import TYPES
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import (
    WindowLoad,
    WindowResult,
    duplicate_key_error,
    null_last_modified_error,
    staging_suffix,
)
from transfer_platform.errors import ConnectionFailure, SchemaMismatch

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import DataFrame, SparkSession

STATUS_TABLE = "_transfer_status"
STAGING_PREFIX = "_tp_stg_"
WRITE_BATCH_SIZE = 10_000


def target_ddl(table: str, model: ModelConfig) -> str:
    columns = ", ".join(f"{quote_ident(c.destination_name)} {TYPES[c.data_type].postgres}" for c in model.columns)
    key = ", ".join(quote_ident(c.destination_name) for c in model.primary_key)
    return f"CREATE TABLE IF NOT EXISTS {table} ({columns}, PRIMARY KEY ({key}))"


def status_ddl(table: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {table} ("
        "data_model_name text PRIMARY KEY, "
        "transfer_last_updated_at timestamp with time zone, "
        "high_watermark timestamp with time zone, "
        "state jsonb, "
        "last_transfer_id text, "
        "updated_at timestamp with time zone NOT NULL DEFAULT now())"
    )


class PostgresWriter:
    def __init__(self, destination: PostgresDestination) -> None:
        self.destination = destination
        self.name = destination.name
        self.schema = destination.connection.schema_ or "public"
        self.what = f"PostgreSQL destination '{destination.name}'"
        self._conn: psycopg.Connection | None = None

    # -- connection ---------------------------------------------------------------------------

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect_postgres(self.destination.connection, what=self.what, autocommit=True)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def check(self) -> None:
        self.conn.execute("SELECT 1")

    def table(self, model: ModelConfig) -> str:
        return qualified(self.schema, model.model_name)

    @property
    def status_table(self) -> str:
        return qualified(self.schema, STATUS_TABLE)

    # -- protocol -----------------------------------------------------------------------------

    def prepare(self, model: ModelConfig, transfer_id: str) -> ModelState:
        conn = self.conn
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(self.schema)}")
        conn.execute(target_ddl(self.table(model), model))
        conn.execute(status_ddl(self.status_table))
        self._check_columns(model)
        self._drop_stale_staging(model)
        return self.read_state(model)

    def read_state(self, model: ModelConfig) -> ModelState:
        row = self.conn.execute(
            f"SELECT state::text FROM {self.status_table} WHERE data_model_name = %s", (model.model_name,)
        ).fetchone()
        return ModelState.from_json(row[0] if row else None)

    def write_window(self, frame: DataFrame, load: WindowLoad) -> WindowResult:
        model = load.model
        staging_name = STAGING_PREFIX + staging_suffix(model.model_name, load.transfer_id)
        staging = qualified(self.schema, staging_name)
        self.conn.execute(f"DROP TABLE IF EXISTS {staging}")
        self.conn.execute(f"CREATE UNLOGGED TABLE {staging} (LIKE {self.table(model)})")
        try:
            self._stage(frame, staging)
            return self._merge(load, staging)
        finally:
            self.conn.execute(f"DROP TABLE IF EXISTS {staging}")

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

    # -- steps --------------------------------------------------------------------------------

    def _stage(self, frame: DataFrame, staging: str) -> None:
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        connection = self.destination.connection
        url = postgres_jdbc_url(connection) + "?reWriteBatchedInserts=true&stringtype=unspecified"
        try:
            (
                frame.write.format("jdbc")
                .options(url=url, driver="org.postgresql.Driver", dbtable=staging,
                         batchsize=str(WRITE_BATCH_SIZE),
                         numPartitions=str(self.destination.max_concurrent_queries_per_transfer),
                         sessionInitStatement="SET TIME ZONE 'UTC'",
                         **jdbc_properties(connection, f"destinations.{self.name}.connection.password"))
                .mode("append")
                .save()
            )
        except (Py4JJavaError, PySparkException) as exc:
            reason = spark_error_reason(exc)
            if "Connection" in reason and "refused" in reason:
                raise ConnectionFailure(self.what, host=connection.host, port=connection.port,
                                        reason=reason) from None
            raise

    def _merge(self, load: WindowLoad, staging: str) -> WindowResult:
        import psycopg

        model = load.model
        lm = quote_ident(model.last_modified.destination_name)
        conn = self.conn
        try:
            with conn.transaction():
                conn.execute(
                    f"INSERT INTO {self.status_table} (data_model_name) VALUES (%s) ON CONFLICT DO NOTHING",
                    (model.model_name,),
                )
                row = conn.execute(
                    f"SELECT state::text FROM {self.status_table} WHERE data_model_name = %s FOR UPDATE",
                    (model.model_name,),
                ).fetchone()
                state = ModelState.from_json(row[0] if row else None)
                if load.reset_first:
                    state = state.reset()
                self._refuse_bad_rows(load, staging)
                rows, delta_rows, max_lm, volume = conn.execute(
                    f"SELECT count(*), count(*) FILTER (WHERE {lm} > %s), max({lm}), "
                    f"pg_total_relation_size(%s::regclass) FROM {staging}",
                    (state.high_watermark, staging),
                ).fetchone()
                if state.high_watermark is None:
                    delta_rows = rows
                if load.reset_first:
                    conn.execute(f"TRUNCATE {self.table(model)}")
                conn.execute(plan_upsert(
                    target=self.table(model), staging=staging,
                    columns=[c.destination_name for c in model.columns],
                    primary_key=[c.destination_name for c in model.primary_key],
                    last_modified=model.last_modified.destination_name,
                ))
                new_state = state.after_window(
                    load.progress, batch_max_last_modified=max_lm, configured_start=load.configured_start
                )
                self._record_state(model, new_state, load.transfer_id)
        except psycopg.OperationalError as exc:
            connection = self.destination.connection
            raise ConnectionFailure(self.what, host=connection.host, port=connection.port,
                                    reason=str(exc).strip().splitlines()[0]) from None
        return WindowResult(rows, delta_rows, int(volume or 0), max_lm, new_state)

    def _refuse_bad_rows(self, load: WindowLoad, staging: str) -> None:
        model = load.model
        keys = [c.destination_name for c in model.primary_key]
        key_sql = ", ".join(quote_ident(k) for k in keys)
        lm_name = model.last_modified.destination_name
        row = self.conn.execute(
            f"SELECT {key_sql} FROM {staging} WHERE {quote_ident(lm_name)} IS NULL LIMIT 1"
        ).fetchone()
        if row is not None:
            raise null_last_modified_error(model, self.name, dict(zip(keys, row, strict=True)))
        row = self.conn.execute(
            f"SELECT {key_sql}, count(*) FROM {staging} GROUP BY {key_sql} HAVING count(*) > 1 LIMIT 1"
        ).fetchone()
        if row is not None:
            raise duplicate_key_error(model, self.name, dict(zip(keys, row, strict=False)), row[-1])

    def _record_state(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        self.conn.execute(
            f"UPDATE {self.status_table} SET transfer_last_updated_at = %s, high_watermark = %s, "
            "state = %s::jsonb, last_transfer_id = %s, updated_at = now() WHERE data_model_name = %s",
            (state.watermark, state.high_watermark, state.to_json(), transfer_id, model.model_name),
        )

    def _check_columns(self, model: ModelConfig) -> None:
        rows = self.conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
            (self.table(model),),
        ).fetchall()
        existing = dict(rows)
        for column in model.columns:
            expected = TYPES[column.data_type].postgres
            actual = existing.get(column.destination_name)
            if actual is None:
                raise SchemaMismatch(
                    f"model '{model.model_name}' -> destination '{self.name}': column "
                    f"'{column.destination_name}' is missing from table {self.table(model)}. "
                    "Fix: run a full refresh (transfer-platform transfer "
                    f"{self.name} --model {model.model_name} --full-refresh)"
                )
            if actual != expected:
                raise SchemaMismatch(
                    f"model '{model.model_name}' -> destination '{self.name}': column "
                    f"'{column.destination_name}' is {actual} in the destination but the model says "
                    f"{column.data_type} ({expected}). Fix: run a full refresh"
                )

    def _drop_stale_staging(self, model: ModelConfig) -> None:
        prefix = STAGING_PREFIX + staging_suffix(model.model_name, "")
        stale = self.conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s AND starts_with(tablename, %s)",
            (self.schema, prefix),
        ).fetchall()
        for (name,) in stale:
            self.conn.execute(f"DROP TABLE IF EXISTS {qualified(self.schema, name)}")

