"""A window's staging table: created with the target's columns (no constraints: a NULL key is
refused by our check, by name), loaded with ``COPY`` (from Spark's workers, or from this process),
checked (NULL keys, NULL last-modified values, duplicate keys) and dropped; and the staging
tables a dead transfer left, dropped under the model's lock."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from transfer_platform.connections import postgres_connect_kwargs, spark_error_reason
from transfer_platform.core.sql import qualified
from transfer_platform.destinations.base import (
    duplicate_key_error,
    null_key_error,
    null_last_modified_error,
    staging_suffix,
)
from transfer_platform.destinations.postgres import sql
from transfer_platform.destinations.postgres.copy import copy_batches, copy_partition
from transfer_platform.destinations.postgres.errors import first_line
from transfer_platform.errors import ConnectionFailure, DataError
from transfer_platform.phases import log_phase

if TYPE_CHECKING:
    from datetime import datetime

    import psycopg
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.base import WindowLoad
    from transfer_platform.vendors.postgres import PostgresDestination


@dataclass
class StagingTable:
    """A window's staging table and the table it is merged into."""

    name: str  # in the destination schema
    table: str  # qualified
    target_name: str  # the live table, or the refresh's built aside
    target: str  # qualified
    #: the target was empty and nothing depends on it: the staging table may replace it
    swappable: bool
    # what the check found (see Staging._refuse)
    rows: int = 0
    delta_rows: int = 0
    max_last_modified: datetime | None = None
    volume: int = 0
    marked: int = 0
    duplicates_refused: bool = False  # the duplicate-key check already ran


class Staging:
    """The staging tables (a mixin of ``PostgresWriter``)."""

    conn: psycopg.Connection
    destination: PostgresDestination
    name: str
    schema: str
    what: str

    def staging_table_name(self, model: ModelConfig, transfer_id: str) -> str:
        return sql.STAGING_PREFIX + staging_suffix(model.model_name, transfer_id)

    def _create_staging(self, load: WindowLoad, *, in_memory: bool) -> StagingTable:
        model = load.model
        target_name = self.refresh_table_name(model) if load.into_refresh else model.model_name
        target = qualified(self.schema, target_name)
        name = self.staging_table_name(model, load.transfer_id)
        staging = qualified(self.schema, name)
        self.conn.execute(sql.drop_table(staging))
        # an empty target that nothing depends on can be *replaced* by the staging table: the batch
        # is then written once (no merge); the staging table is logged so that it can become it
        swappable = self._is_empty(target)
        self.conn.execute(sql.staging_like(staging, target, logged=swappable))
        swappable = swappable and self._replaceable(target, staging)
        return StagingTable(name, staging, target_name, target, swappable)

    def _stage_frame(self, frame: DataFrame, staging: StagingTable, load: WindowLoad) -> StagingTable:
        self._stage(frame, staging.table)
        self._log_staged(staging, load)
        return staging

    def _stage_arrow(self, batch: pa.Table, staging: StagingTable, load: WindowLoad) -> StagingTable:
        """A window already read into this process (with others, in one Spark job): COPY from
        here into the staging table."""
        self._copy(load, batch, staging.table)
        self._log_staged(staging, load)
        return staging

    def _log_staged(self, staging: StagingTable, load: WindowLoad) -> None:
        log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=load.model.model_name,
                  staging_table=staging.name)

    def _remove_staging(self, staging: StagingTable, load: WindowLoad) -> None:
        self.conn.execute(sql.drop_table(staging.table))
        log_phase("clean up", transfer_id=load.transfer_id, destination=self.name, model=load.model.model_name,
                  staging_table=staging.name)

    def _clean_staging(self, model: ModelConfig) -> None:
        """Drop the model's staging tables: under its lock, only a dead transfer's can be there."""
        prefix = sql.STAGING_PREFIX + staging_suffix(model.model_name, "")
        stale = self.conn.execute(sql.TABLES_STARTING_WITH, (self.schema, prefix)).fetchall()
        for (name,) in stale:
            self.conn.execute(sql.drop_table(qualified(self.schema, name)))
            log_phase("clean up", transfer_id="(a dead transfer)", destination=self.name,
                      model=model.model_name, staging_table=name, left_by_a_dead_transfer=True)

    # -- loading ---------------------------------------------------------------------------------

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
                raise DataError(f"COPY into the staging table failed: {first_line(exc)}",
                                model=load.model.model_name, destination=self.name,
                                fix="check that each column's data_type matches the source values") from None

    # -- the rules -------------------------------------------------------------------------------

    def _refuse(self, staging: StagingTable, load: WindowLoad) -> None:
        """One scan of the staged window (its rows, those newer than the high watermark, its
        largest last-modified value, its size, its rows newly marked deleted) that refuses a NULL
        key or last-modified value by name; a duplicate key is refused here too, unless the
        staging table may become the target (building its primary key refuses one then)."""
        model = load.model
        with self._translated_errors():
            state = self.read_state(model, "refresh_state" if load.into_refresh else "state")
            rows, delta_rows, max_lm, volume, null_keys, null_lms, marked = self.conn.execute(
                sql.batch_summary_sql(model, staging.table),
                {"hw": None if state.high_watermark is None else model.change_column.value(state.high_watermark),
                 "staging": staging.table},
            ).fetchone()
            if null_keys or null_lms:
                self._refuse_null_values(load, staging.table)
            if not staging.swappable:
                self._refuse_duplicate_keys(load, staging)
        staging.rows, staging.volume, staging.marked = rows, int(volume or 0), marked
        staging.delta_rows = rows if state.high_watermark is None else delta_rows
        staging.max_last_modified = None if max_lm is None else model.change_column.moment(max_lm)

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

    def _refuse_duplicate_keys(self, load: WindowLoad, staging: StagingTable) -> None:
        if staging.duplicates_refused:
            return
        model = load.model
        keys = [c.destination_name for c in model.primary_key]
        row = self.conn.execute(sql.first_duplicate_key(staging.table, keys)).fetchone()
        if row is not None:
            raise duplicate_key_error(model, self.name, dict(zip(keys, row, strict=False)), row[-1])
        staging.duplicates_refused = True
