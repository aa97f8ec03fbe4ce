"""Delta Lake destination, written with the ``deltalake`` package (delta-rs).

Per window: Spark writes the batch as Parquet into a staging folder beside the tables; delta-rs
reads it, the batch is checked (no NULL last-modified value, no duplicate key), and one MERGE
commit upserts it on the primary key (never replacing a row by an older one) with the model's new
state in the commit's metadata. When the MERGE changes nothing, delta-rs makes no commit, so an
empty append records the state instead. The staging folder is removed either way, and a dead
transfer's leftovers are removed by the next :meth:`DeltaWriter.prepare`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from transfer_platform.config.models import DeltaDestination, ModelConfig
from transfer_platform.core.timeutil import utc
from transfer_platform.core.types import TYPES
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import (
    WindowLoad,
    WindowResult,
    duplicate_key_error,
    null_last_modified_error,
    offending_key,
    staging_suffix,
)
from transfer_platform.errors import ConnectionFailure, DataError, SchemaMismatch

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

STATE_KEY = "transfer_platform.state"
TRANSFER_KEY = "transfer_platform.transfer_id"
STAGING_DIR = "_staging"
_HISTORY_PAGE = 100

_ARROW_TYPES = {
    "string": pa.string(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "timestamp_us_utc": pa.timestamp("us", tz="UTC"),
    "date32": pa.date32(),
    "decimal_38_9": pa.decimal128(38, 9),
}


def arrow_schema(model: ModelConfig) -> pa.Schema:
    return pa.schema([(c.destination_name, _ARROW_TYPES[TYPES[c.data_type].arrow]) for c in model.columns])


def _sql_name(name: str) -> str:
    """delta-rs predicates quote identifiers with backticks (double quotes make strings)."""
    return "`" + name.replace("`", "``") + "`"


def merge_predicates(model: ModelConfig) -> tuple[str, str]:
    """(join on the key, when a matched row may be replaced): newer, or equally new and different."""
    join = " AND ".join(f"t.{_sql_name(c.destination_name)} = s.{_sql_name(c.destination_name)}"
                        for c in model.primary_key)
    lm = _sql_name(model.last_modified.destination_name)
    compared = [c.destination_name for c in model.columns
                if not c.is_primary_key and not c.is_last_modified]
    newer = f"s.{lm} > t.{lm}"
    if not compared:
        return join, newer
    # each comparison in its own parentheses: the predicate parser binds OR tighter than IS DISTINCT FROM
    differs = " OR ".join(f"(s.{_sql_name(c)} IS DISTINCT FROM t.{_sql_name(c)})" for c in compared)
    return join, f"{newer} OR (s.{lm} = t.{lm} AND ({differs}))"


class DeltaWriter:
    def __init__(self, destination: DeltaDestination) -> None:
        self.destination = destination
        self.name = destination.name
        self.root = Path(destination.connection.path)

    def close(self) -> None:
        """Nothing to release: delta-rs opens files per call."""

    def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConnectionFailure(f"Delta destination '{self.name}' (folder {self.root})",
                                    reason=str(exc), fix="check connection.path and its permissions") from None

    def table_path(self, model: ModelConfig) -> Path:
        return self.root / model.model_name

    def staging_path(self, model: ModelConfig, transfer_id: str) -> Path:
        return self.root / STAGING_DIR / staging_suffix(model.model_name, transfer_id)

    # -- protocol -----------------------------------------------------------------------------

    def prepare(self, model: ModelConfig, transfer_id: str) -> ModelState:
        from deltalake import DeltaTable

        self.check()
        path = self.table_path(model)
        if not DeltaTable.is_deltatable(str(path)):
            DeltaTable.create(str(path), schema=arrow_schema(model), name=model.model_name)
        table = DeltaTable(str(path))
        self._check_columns(model, table)
        for stale in (self.root / STAGING_DIR).glob(staging_suffix(model.model_name, "") + "*"):
            shutil.rmtree(stale, ignore_errors=True)
        return read_state(table)

    def write_window(self, frame: DataFrame, load: WindowLoad) -> WindowResult:
        staging = self.staging_path(load.model, load.transfer_id)
        try:
            frame.write.mode("overwrite").parquet(str(staging))
            batch = self._read_staged(staging, load.model)
            volume = sum(f.stat().st_size for f in staging.glob("*.parquet"))
            return self._merge(batch, load, volume)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        return spark.read.parquet(*self._current_files(model))

    # -- steps --------------------------------------------------------------------------------

    def _read_staged(self, staging: Path, model: ModelConfig) -> pa.Table:
        schema = arrow_schema(model)
        files = sorted(str(p) for p in staging.glob("*.parquet"))
        if not files:
            return schema.empty_table()
        table = pads.dataset(files, format="parquet").to_table(columns=schema.names)
        return table.cast(schema)

    def _merge(self, batch: pa.Table, load: WindowLoad, volume: int) -> WindowResult:
        from deltalake import CommitProperties, DeltaTable, write_deltalake

        model = load.model
        table = DeltaTable(str(self.table_path(model)))
        state = ModelState() if load.reset_first else read_state(table)
        refuse_bad_rows(batch, model, self.name)
        lm_values = batch.column(model.last_modified.destination_name)
        max_lm = pc.max(lm_values).as_py() if batch.num_rows else None
        if state.high_watermark is None:
            delta_rows = batch.num_rows
        else:
            delta_rows = pc.sum(pc.greater(lm_values, pa.scalar(state.high_watermark, lm_values.type))).as_py() or 0
        new_state = state.after_window(
            load.progress, batch_max_last_modified=None if max_lm is None else utc(max_lm),
            configured_start=load.configured_start,
        )
        commit = CommitProperties(custom_metadata={STATE_KEY: new_state.to_json(),
                                                   TRANSFER_KEY: load.transfer_id})
        before = table.version()
        if load.reset_first:
            write_deltalake(table, batch, mode="overwrite", commit_properties=commit)
        elif batch.num_rows:
            join, newer = merge_predicates(model)
            (
                table.merge(batch, predicate=join, source_alias="s", target_alias="t",
                            commit_properties=commit)
                .when_matched_update_all(predicate=newer)
                .when_not_matched_insert_all()
                .execute()
            )
        table = DeltaTable(str(self.table_path(model)))
        if table.version() == before:  # nothing changed: record the state in an empty commit
            write_deltalake(table, batch.schema.empty_table(), mode="append", commit_properties=commit)
        return WindowResult(batch.num_rows, int(delta_rows), volume,
                            None if max_lm is None else utc(max_lm), new_state)

    def _check_columns(self, model: ModelConfig, table: DeltaTable) -> None:
        existing = {f.name: f.type for f in pa.schema(table.schema().to_arrow())}
        for field in arrow_schema(model):
            actual = existing.get(field.name)
            if actual is None:
                raise SchemaMismatch(
                    f"model '{model.model_name}' -> destination '{self.name}': column '{field.name}' "
                    "is missing from the Delta table. Fix: run a full refresh"
                )
            if pa.types.is_timestamp(field.type) and pa.types.is_timestamp(actual):
                continue
            if actual != field.type:
                raise SchemaMismatch(
                    f"model '{model.model_name}' -> destination '{self.name}': column '{field.name}' "
                    f"is {actual} in the Delta table but the model says {field.type}. Fix: run a full refresh"
                )

    def _current_files(self, model: ModelConfig) -> list[str]:
        from deltalake import DeltaTable

        return DeltaTable(str(self.table_path(model))).file_uris()


def read_state(table: DeltaTable) -> ModelState:
    """The state recorded by the newest commit of ours (other writers' commits carry none)."""
    limit = _HISTORY_PAGE
    while True:
        history = table.history(limit)
        for entry in history:
            if STATE_KEY in entry:
                return ModelState.from_json(entry[STATE_KEY])
        if len(history) < limit:
            return ModelState()
        limit *= 10


def refuse_bad_rows(batch: pa.Table, model: ModelConfig, destination: str) -> None:
    keys = [c.destination_name for c in model.primary_key]
    lm_name = model.last_modified.destination_name
    for key in keys:  # a NULL key never matches in the MERGE: each re-read would add a copy
        null_keys = batch.filter(pc.is_null(batch.column(key)))
        if null_keys.num_rows:
            values = {k: null_keys.column(k)[0].as_py() for k in keys}
            raise DataError(
                f"a row has a NULL primary key value ({key}) at key {offending_key(model, values)}",
                model=model.model_name, destination=destination,
                fix=f"give {key} a value in every source row, or mark the right columns with "
                    "is_primary_key",
            )
    nulls = batch.filter(pc.is_null(batch.column(lm_name)))
    if nulls.num_rows:
        raise null_last_modified_error(model, destination, {k: nulls.column(k)[0].as_py() for k in keys})
    if not batch.num_rows:
        return
    counts = batch.group_by(keys).aggregate([(keys[0], "count")])
    repeated = counts.filter(pc.greater(counts.column(f"{keys[0]}_count"), 1))
    if repeated.num_rows:
        values = {k: repeated.column(k)[0].as_py() for k in keys}
        count = repeated.column(f"{keys[0]}_count")[0].as_py()
        raise duplicate_key_error(model, destination, values, count)
