"""A window's staging table: created with the model's columns (all nullable, no key), loaded
with ``LOAD DATA LOCAL INFILE`` (from Spark's workers, or from this process: :mod:`.load`),
checked (NULL keys, NULL last-modified values, a date or timestamp DATETIME cannot hold, a string
key longer than its column, duplicate keys) and dropped; and the staging tables a dead transfer
left, dropped under the model's lock."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from transfer_platform.destinations.base import (
    duplicate_key_error,
    null_key_error,
    null_last_modified_error,
    offending_key,
    staging_suffix,
)
from transfer_platform.destinations.mysql import sql
from transfer_platform.destinations.mysql.errors import (
    DENIED,
    connect_kwargs,
    first_line,
    missing_privilege,
)
from transfer_platform.destinations.mysql.load import LoadRefused, load_batches, load_partition
from transfer_platform.destinations.mysql.state import param
from transfer_platform.errors import ConnectionFailure, DataError
from transfer_platform.phases import log_phase
from transfer_platform.runtime.connections import spark_error_reason

if TYPE_CHECKING:
    from datetime import datetime

    import pyarrow as pa
    from pyspark.sql import DataFrame

    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.base import WindowLoad


@dataclass
class StagingTable:
    name: str
    table: str  # qualified
    target: str  # qualified: the live table, or the refresh's built aside
    rows: int = 0
    delta_rows: int = 0
    max_last_modified: datetime | None = None
    volume: int = 0
    marked: int = 0


class Staging:
    """The staging tables (a mixin of ``MysqlWriter``)."""

    def staging_table_name(self, model: ModelConfig, transfer_id: str) -> str:
        return sql.STAGING_PREFIX + staging_suffix(model.model_name, transfer_id)

    def _create_staging(self, load: WindowLoad, *, in_memory: bool) -> StagingTable:
        model = load.model
        name = self.staging_table_name(model, load.transfer_id)
        table = sql.qualified(self.database, name)
        target = self.refresh_table(model) if load.into_refresh else self.table(model)
        with self._translated_errors():
            self._exec(sql.drop_table(table))
            self._exec(sql.staging_ddl(table, model))
        return StagingTable(name, table, target)

    def _stage_frame(self, frame: DataFrame, staging: StagingTable, load: WindowLoad) -> StagingTable:
        self._stage(frame, staging.table, load.model)
        self._log_staged(staging, load)
        return staging

    def _stage_arrow(self, batch: pa.Table, staging: StagingTable, load: WindowLoad) -> StagingTable:
        import pymysql

        with self._translated_errors():
            try:
                load_batches(self.conn, sql.load_data(staging.table, "{path}", batch.column_names), batch.to_batches())
            except LoadRefused as exc:
                raise self._load_error(load.model, str(exc)) from None
            except (pymysql.err.DataError, pymysql.err.IntegrityError, pymysql.err.InternalError) as exc:
                raise self._load_error(load.model, first_line(exc)) from None
            except pymysql.err.OperationalError as exc:
                if exc.args and exc.args[0] in DENIED or (exc.args and exc.args[0] >= 2000):
                    raise
                raise self._load_error(load.model, first_line(exc)) from None
        self._log_staged(staging, load)
        return staging

    def _load_error(self, model: ModelConfig, reason: str) -> DataError:
        return DataError(f"LOAD DATA into the staging table failed: {reason}", model=model.model_name,
                         destination=self.name, fix="check that each column's data_type matches the source values")

    def _stage(self, frame: DataFrame, staging: str, model: ModelConfig) -> None:
        """Spark hands each partition to a Python worker as Arrow batches (``mapInArrow``: memory
        stays flat), which loads them with LOAD DATA LOCAL INFILE in a connection of its own; at
        most ``max_concurrent_queries_per_transfer`` partitions load at once."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        connection = self.destination.connection
        load = partial(load_partition, connect_kwargs(connection, what=f"destinations.{self.name}"),
                       sql.load_data(staging, "{path}", frame.columns))
        try:
            frame.coalesce(self.destination.max_concurrent_queries_per_transfer).mapInArrow(load, "rows long").collect()
        except (Py4JJavaError, PySparkException) as exc:
            reason = spark_error_reason(exc)
            if "Can't connect" in reason or "Lost connection" in reason:
                raise ConnectionFailure(self.what, host=connection.host, port=connection.port,
                                        reason=reason) from None
            if "command denied" in reason or "access denied" in reason.lower():
                raise missing_privilege(self.destination, self.what, RuntimeError(reason)) from None
            raise self._load_error(model, reason.removeprefix("LOAD DATA into the staging table failed: ")) from None

    def _log_staged(self, staging: StagingTable, load: WindowLoad) -> None:
        log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=load.model.model_name,
                  staging_table=staging.name)

    def _remove_staging(self, staging: StagingTable, load: WindowLoad) -> None:
        with self._translated_errors():
            self._exec(sql.drop_table(staging.table))
        log_phase("clean up", transfer_id=load.transfer_id, destination=self.name, model=load.model.model_name,
                  staging_table=staging.name)

    def _clean_staging(self, model: ModelConfig) -> None:
        """Under the model's lock: a dead transfer's staging tables and the old table of a
        publish dropped, its half-finished publish finished (``States._finish_publish``)."""
        with self._translated_errors():
            for prefix in (sql.STAGING_PREFIX + staging_suffix(model.model_name, ""), self.old_table_name(model)):
                for (name,) in self._all(sql.TABLES_STARTING_WITH, (self.database, prefix, prefix)):
                    self._exec(sql.drop_table(sql.qualified(self.database, name)))
                    log_phase("clean up", transfer_id="(a dead transfer)", destination=self.name,
                              model=model.model_name, staging_table=name, left_by_a_dead_transfer=True)
            self._finish_publish(model)

    # -- the rules ---------------------------------------------------------------------------

    def _refuse(self, staging: StagingTable, load: WindowLoad) -> None:
        model = load.model
        with self._translated_errors():
            state = self._lock_free_state(model, "refresh_state" if load.into_refresh else "state")
            hw = None if state.high_watermark is None else param(model.change_column.value(state.high_watermark))
            rows, delta_rows, max_lm, null_keys, null_lms, marked = self._one(
                sql.batch_summary_sql(model, staging.table), (hw, hw, hw))
            if null_keys or null_lms:
                self._refuse_null_values(load, staging.table)
            self._refuse_out_of_range(load, staging.table)
            self._refuse_duplicate_keys(load, staging.table, staging.target)
            (volume,) = self._one(sql.TABLE_SIZE, (self.database, staging.name)) or (0,)
        staging.rows, staging.volume, staging.marked = int(rows), int(volume or 0), int(marked)
        staging.delta_rows = int(rows) if state.high_watermark is None else int(delta_rows)
        staging.max_last_modified = None if max_lm is None else model.change_column.moment(max_lm)

    def _lock_free_state(self, model: ModelConfig, column: str):
        from transfer_platform.core.watermarks import ModelState

        row = self._one(sql.read_state(self.status_table, column), (model.model_name,))
        return ModelState.from_json(row[0] if row else None)

    def _refuse_null_values(self, load: WindowLoad, staging: str) -> None:
        model = load.model
        keys = [c.destination_name for c in model.primary_key]
        for key in keys:
            row = self._one(sql.first_key_where_null(staging, keys, key))
            if row is not None:
                raise null_key_error(model, self.name, key, dict(zip(keys, row, strict=True)))
        row = self._one(sql.first_key_where_null(staging, keys, model.last_modified.destination_name))
        if row is not None:
            raise null_last_modified_error(model, self.name, dict(zip(keys, row, strict=True)))

    def _refuse_out_of_range(self, load: WindowLoad, staging: str) -> None:
        """A date or timestamp before 1000-01-01 (MySQL's DATETIME and DATE hold 1000-01-01 to
        9999-12-31), or a string key longer than its VARCHAR column: refused by name."""
        model = load.model
        keys = [c.destination_name for c in model.primary_key]
        dated = [c.destination_name for c in model.columns if c.data_type in ("timestamp", "date")]
        if dated:
            row = self._one(sql.first_out_of_range(staging, keys, dated))
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
        if long_keys:
            row = self._one(sql.first_long_key(staging, keys, long_keys))
            if row is not None:
                raise DataError(
                    f"a string primary key value is longer than {sql.KEY_STRING_LENGTH} characters (key "
                    f"starting {offending_key(model, dict(zip(keys, row, strict=True)))}): MySQL key columns "
                    f"are {sql.KEY_STRING_TYPE}; nothing was written",
                    model=model.model_name, destination=self.name,
                    fix="key the model on shorter columns (a hash of the long value, say)")

    def _refuse_duplicate_keys(self, load: WindowLoad, staging: str, target: str | None = None) -> None:
        """A key staged twice, named. With ``target``: only among the keys the target holds (a
        join on its primary key, cheap); a key it does not hold, staged twice, makes the merge's
        insert fail on the primary key, which then runs the full check (``Merge._merge``)."""
        model = load.model
        keys = [c.destination_name for c in model.primary_key]
        row = self._one(sql.first_duplicate_key(staging, keys) if target is None
                        else sql.first_duplicate_held_key(staging, target, keys))
        if row is not None:
            raise duplicate_key_error(model, self.name, dict(zip(keys, row, strict=False)), row[-1])
