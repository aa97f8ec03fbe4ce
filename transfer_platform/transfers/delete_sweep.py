"""The hard-delete sweep: rows gone from the source leave the destination.

A last-modified column never sees a row deleted outright. A model with ``delete_detection:
sweep`` is swept on its own schedule: the tenant's source keys (read through the model's own
reader: tenant filter, ``source_query``) are compared in Spark with the destination's (key,
last-modified) rows, and the destination rows whose key is no longer in the source are removed
(staged and deleted in one transaction on PostgreSQL, MERGE commits of bounded batches on Delta).
Spark's anti-join spills to disk, so memory stays flat on large tables.

Safety: a row that may still be arriving (last-modified at or after the watermark, the last
transfer's clock, minus the lookback) is never removed; the sweep holds the model's lock in the
destination (never beside a transfer of the same model); a source read that fails raises before
anything is deleted (a failed read is never taken for an empty one). A tenant whose rows are all
gone is emptied: that is what the source says. The destination holds one recipient's rows, so no
other tenant is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.planning import windowing_for
from transfer_platform.core.timeutil import isoformat, utc
from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.destinations.base import writer_for
from transfer_platform.sources.base import ReadRequest, reader_for, spark_col
from transfer_platform.transfers.integrity import (
    OPEN_END,
    key_model,
    live_table,
    spark_errors,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class SweepReport:
    destination: str
    model: str
    rows_compared: int  # destination rows compared with the source's keys
    rows_deleted: int
    horizon: datetime | None  # rows last modified at or after it were left alone

    def as_dict(self) -> dict[str, Any]:
        return {"destination": self.destination, "model": self.model, "rows_compared": self.rows_compared,
                "rows_deleted": self.rows_deleted, "horizon": isoformat(self.horizon)}


def sweep_horizon(watermark: datetime | None, lookback_seconds: int, now: datetime) -> datetime | None:
    """Rows last modified before this instant may be removed: the watermark (the last transfer's
    clock) minus the lookback, and never later than ``now`` minus the lookback. A row at or after
    it may still be arriving. (Not the integrity horizon, which starts at the last *delivered*
    value: a sparse tenant's newest row, once deleted, would be kept forever.)"""
    if watermark is None:
        return None
    lookback = timedelta(seconds=lookback_seconds)
    return min(utc(watermark), utc(now)) - lookback


def sweep_deletes(spark: SparkSession, config: PlatformConfig, destination_name: str, model: ModelConfig,
                  now: datetime, sweep_id: str) -> SweepReport:
    """Remove the destination rows of ``model`` whose key is gone from the tenant's source rows."""
    from pyspark.sql import functions as F

    destination = config.destination(destination_name)
    tenant = config.recipient(destination.recipient).id_in_provider_system
    windowing = windowing_for(config, destination_name, model)
    keys_only = key_model(model)
    keys = [c.destination_name for c in model.primary_key]
    lm = model.last_modified.destination_name
    reader = reader_for(config.source(model.source_name))
    reader.check(destination.name)
    writer = writer_for(destination)
    try:
        writer.lock_model(model, sweep_id)  # never beside a transfer of this model
        state, table = live_table(spark, writer, keys_only)
        horizon = sweep_horizon(state.watermark, windowing.lookback_seconds, now)
        if table is None or horizon is None:  # nothing delivered yet
            return SweepReport(destination.name, model.model_name, 0, 0, horizon)
        start = windowing.configured_start
        source = reader.read(spark, ReadRequest(keys_only, tenant, ReadBounds(start, OPEN_END, Window(start, OPEN_END)),
                                                destination.name))
        with spark_errors(f"comparing the keys of destination '{destination.name}' with the source",
                          model, destination.name):
            compared = table.count()
            gone = (table.join(source.select(*[spark_col(k) for k in keys]), on=keys, how="left_anti")
                    .where(spark_col(lm) < F.lit(model.change_column.bound(horizon))))
            deleted = writer.delete_rows(gone, model, sweep_id)
    finally:
        writer.close()
    return SweepReport(destination.name, model.model_name, compared, deleted, horizon)
