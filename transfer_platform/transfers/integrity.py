"""Integrity checks: compare a tenant's source rows with its destination, key by key.

Knows nothing of Dagster: the asset check (``orchestration/catalog/checks.py``) and the tests call
:func:`check_integrity` and turn its :class:`IntegrityReport` into whatever they report.

What is compared:

- the source side is read through the model's own reader (tenant filter, ``source_query``
  wrapping and schema tenancy all apply), every column of the model, from the configured start on
  (rows a transfer removes, marked deleted, are left out). The read has no upper bound at the check's "now": a row updated between
  "now" and the moment Spark runs the query would otherwise vanish from the read and look
  orphaned; with it, that row is a (pending) change;
- the destination side is the live table's columns of the model; a destination that has no
  table yet is empty.

Both are joined on the key (full outer join, in Spark) and every row falls in at most one class:
``missing`` (in the source only), ``orphaned`` (in the destination only: deleted in the source,
which incremental transfers do not propagate), ``stale`` (the destination's last-modified value is
older than the source's), ``incorrect`` (newer: our upsert never does that, so something else
wrote the table; or as new, with other values: a hash of the other columns, in the model's types,
differs; JSON columns are left out of it, since PostgreSQL's jsonb rewrites its text). A difference is ``pending`` instead, not a failure, when the row's
last-modified value (the source's; the destination's for an orphaned row) is at or after the
*horizon*: where the next incremental read starts (the greatest value delivered, or the watermark
if earlier, minus the source's lookback: :func:`~transfer_platform.core.planning.resume_for`),
the point before which every row committed in time has been read. Without a committed watermark
everything is pending.

The counts come back from one aggregation; only when there are differences does a second, bounded
query fetch at most :data:`MAX_EXAMPLES` keys per class. No table is collected.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.planning import ModelWindowing, resume_for, windowing_for
from transfer_platform.core.repair import repair_windows
from transfer_platform.core.timeutil import isoformat, utc
from transfer_platform.core.types import TYPES
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.destinations.base import DestinationWriter, writer_for
from transfer_platform.errors import DataError
from transfer_platform.runtime.connections import spark_error_reason
from transfer_platform.sources.base import ReadRequest, reader_for, spark_col
from transfer_platform.transfers.versions import latest_versions_frame

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

#: the classes of difference that fail a check when older than the horizon
FAILURES = ("missing", "stale", "incorrect", "orphaned")
MAX_REPAIR_VALUES = 100_000
PENDING = "pending"
MAX_EXAMPLES = 5
#: upper bound of the source read: every row from the configured start on (see the module doc)
OPEN_END = datetime(9999, 12, 31, tzinfo=UTC)

# column names of the comparison frame (prefixed so that no model column can clash)
_IN_SOURCE, _IN_DESTINATION = "_tp_in_source", "_tp_in_destination"
_SOURCE_LM, _DESTINATION_LM = "_tp_source_lm", "_tp_destination_lm"
_SOURCE_HASH, _DESTINATION_HASH = "_tp_source_hash", "_tp_destination_hash"
_CLASS, _RANK = "_tp_class", "_tp_rank"


@dataclass(frozen=True)
class IntegrityReport:
    """The comparison of one model of one destination, counts and a few example keys per class."""

    destination: str
    model: str
    checked_at: datetime
    watermark: datetime | None
    lookback_seconds: int
    horizon: datetime | None
    rows_compared: int = 0  # source rows of the tenant
    missing: int = 0
    stale: int = 0
    incorrect: int = 0
    orphaned: int = 0
    pending: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)  # class -> keys as 'id=42'
    # what a repair re-transfers: the windows holding the rows a transfer can fix (missing, stale,
    # or as new as the source's with other values), from their source last-modified values
    repair_windows: tuple[Window, ...] = ()

    @property
    def failures(self) -> int:
        return sum(self.counts[name] for name in FAILURES)

    @property
    def passed(self) -> bool:
        return self.failures == 0

    @property
    def counts(self) -> dict[str, int]:
        return {"rows_compared": self.rows_compared, "missing": self.missing, "stale": self.stale,
                "incorrect": self.incorrect, "orphaned": self.orphaned, "pending": self.pending}


def integrity_horizon(windowing: ModelWindowing, state: ModelState, now: datetime) -> datetime | None:
    """Rows last modified before this instant are due in the destination; ``None``: none is due.

    It is where the next incremental read starts: a row at or after it is read by the next
    transfer, whenever it committed. A check run with an earlier clock than the transfer's still
    never calls rows after its own "now" minus the lookback due."""
    resume = resume_for(windowing, state)
    if resume is None:
        return None
    return min(utc(resume.read_from), utc(now) - timedelta(seconds=windowing.lookback_seconds))


def check_integrity(spark: SparkSession, config: PlatformConfig, destination_name: str,
                    model: ModelConfig, now: datetime) -> IntegrityReport:
    """Compare the tenant's source rows of ``model`` with the destination's live table.

    Raises ``ConnectionFailure`` when the source or the destination cannot be reached and
    ``DataError`` when either cannot be read; never writes to either."""
    destination = config.destination(destination_name)
    recipient = config.recipient(destination.recipient)
    windowing = windowing_for(config, destination_name, model)
    reader = reader_for(config.source(model.source_name))
    reader.check(destination.name)
    bounds = ReadBounds(windowing.configured_start, OPEN_END, Window(windowing.configured_start, OPEN_END))
    source = live_source_rows(spark, reader, model, ReadRequest(
        model, recipient.id_in_provider_system, bounds, destination.name))
    writer = writer_for(destination)
    try:
        state, table = live_table(spark, writer, model)
        if table is None:  # nothing delivered yet: an empty table of the source's shape
            table = spark.createDataFrame([], source.schema)
        horizon = integrity_horizon(windowing, state, now)
        compared = compare(source, table, model, horizon)
        counts, examples = _run(compared, model, destination.name)
        repairs = _repair_windows(compared, model, windowing, destination.name) if (
            counts["missing"] or counts["stale"] or counts["incorrect"]) else []
    finally:
        writer.close()
    return IntegrityReport(
        destination=destination.name, model=model.model_name, checked_at=utc(now),
        watermark=state.watermark, lookback_seconds=windowing.lookback_seconds, horizon=horizon,
        examples=examples, repair_windows=tuple(repairs), **counts)


def live_source_rows(spark: SparkSession, reader, model: ModelConfig,  # a SourceReader
                     request: ReadRequest) -> DataFrame:
    """The source's key rows the destination should hold: per key its latest version (as a
    transfer chooses it: a lake keeps each version of a row), and those a transfer removes (marked
    deleted, when the model removes deleted rows) left out, as the transfer leaves them out."""
    rows = latest_versions_frame(reader.read(spark, request), model, counted=False).frame
    if not model.removes_deleted_rows:
        return rows
    from pyspark.sql import functions as F

    marker = model.deletion_marker  # set: the model removes deleted rows
    column = spark_col(marker.destination_name)  # pyright: ignore[reportOptionalMemberAccess]
    marked = column if marker.data_type == "boolean" else column.isNotNull()  # pyright: ignore[reportOptionalMemberAccess]
    return rows.where(~F.coalesce(marked, F.lit(False)))


def key_model(model: ModelConfig) -> ModelConfig:
    """The model narrowed to its primary key and last-modified columns (what a check compares)."""
    return model.model_copy(update={
        "columns": [c for c in model.columns if c.is_primary_key or c.is_last_modified]})


# -- the destination's side -------------------------------------------------------------------


def live_table(spark: SparkSession, writer: DestinationWriter,
               model: ModelConfig) -> tuple[ModelState, DataFrame | None]:
    """The committed state (``DestinationWriter.committed_state``) and the live table (key and
    last-modified columns), without any side effect: no ``prepare`` (it creates tables, evolves
    columns and drops staging tables). ``None`` for a table that does not exist yet."""
    exists = writer.has_table(model)
    state = writer.committed_state(model).state
    if not exists:
        return state, None
    columns = [c.destination_name for c in model.columns]
    with spark_errors(f"reading destination '{writer.name}'", model, writer.name):
        return state, writer.read_table(spark, model).select(*[spark_col(c) for c in columns])


# -- the comparison (Spark) -------------------------------------------------------------------


def compare(source: DataFrame, destination: DataFrame, model: ModelConfig,
            horizon: datetime | None) -> DataFrame:
    """One row per key of either side: the key columns (renamed ``_tp_k<i>``) and ``_tp_class``,
    the row's class (``missing``, ``stale``, ``incorrect``, ``orphaned``, ``pending``) or NULL
    when both sides agree."""
    from pyspark.sql import functions as F

    keys = [c.destination_name for c in model.primary_key]
    lm = model.last_modified.destination_name
    renamed = [F.col(_key_alias(i)) for i in range(len(keys))]

    # the other values, as one hash per row, in the model's types on both sides (a JSON column
    # is left out: PostgreSQL's jsonb rewrites the text it is given)
    values = [c for c in model.columns if not (c.is_primary_key or c.is_last_modified or c.data_type == "json")]

    def side(frame: DataFrame, lm_alias: str, flag: str, hash_alias: str) -> DataFrame:
        digest = (F.xxhash64(*[spark_col(c.destination_name).cast(TYPES[c.data_type].spark) for c in values])
                  if values else F.lit(0))
        return frame.select(*[spark_col(k).alias(_key_alias(i)) for i, k in enumerate(keys)],
                            spark_col(lm).alias(lm_alias), F.lit(True).alias(flag), digest.alias(hash_alias))

    joined = side(source, _SOURCE_LM, _IN_SOURCE, _SOURCE_HASH).join(
        side(destination, _DESTINATION_LM, _IN_DESTINATION, _DESTINATION_HASH),
        on=[_key_alias(i) for i in range(len(keys))], how="full_outer")
    in_source, in_destination = F.col(_IN_SOURCE).isNotNull(), F.col(_IN_DESTINATION).isNotNull()
    source_lm, destination_lm = F.col(_SOURCE_LM), F.col(_DESTINATION_LM)
    difference = (
        F.when(~in_destination, F.lit("missing"))
        .when(~in_source, F.lit("orphaned"))
        .when(destination_lm.isNull(), F.lit("incorrect"))  # our upsert refuses NULLs
        .when(source_lm.isNull(), F.lit("stale"))  # a source NULL is refused by every transfer
        .when(destination_lm < source_lm, F.lit("stale"))
        .when(destination_lm > source_lm, F.lit("incorrect"))
        .when(F.col(_SOURCE_HASH) != F.col(_DESTINATION_HASH), F.lit("incorrect"))  # same time, other values
    )
    due_at = F.when(in_source, source_lm).otherwise(destination_lm)
    # the horizon in the column's own kind (an epoch, a date, text)
    pending = _pending(due_at, None if horizon is None else model.change_column.bound(horizon))
    row_class = F.when(difference.isNull(), F.lit(None)).when(pending, F.lit(PENDING)).otherwise(difference)
    return joined.select(*renamed, in_source.alias(_IN_SOURCE), row_class.alias(_CLASS), source_lm, destination_lm)


def _repair_windows(compared: DataFrame, model: ModelConfig, windowing: ModelWindowing,
                    destination: str) -> list[Window]:
    """The windows holding the rows a transfer can fix, from their source last-modified values
    (at most ``MAX_REPAIR_VALUES`` distinct ones per check: the next cycle takes the rest). A
    destination row newer than the source's is not among them: no transfer replaces it."""
    from pyspark.sql import functions as F

    fixable = (F.col(_CLASS).isin("missing", "stale")
               | ((F.col(_CLASS) == "incorrect") & (F.col(_DESTINATION_LM) == F.col(_SOURCE_LM))))
    with spark_errors("finding the windows to repair", model, destination):
        values = (compared.where(fixable & F.col(_SOURCE_LM).isNotNull()).select(_SOURCE_LM).distinct()
                  .limit(MAX_REPAIR_VALUES).collect())
    return repair_windows(windowing, [model.change_column.moment(row[0]) for row in values])


def _pending(due_at: Column, horizon: object | None) -> Column:
    from pyspark.sql import functions as F

    if horizon is None:
        return F.lit(True)
    # a NULL last-modified value is never pending: no transfer will ever deliver it
    return due_at.isNotNull() & (due_at >= F.lit(horizon))


def _key_alias(index: int) -> str:
    return f"_tp_k{index}"


def _run(compared: DataFrame, model: ModelConfig, destination: str) -> tuple[dict[str, int], dict[str, list[str]]]:
    """The counts (one aggregation) and, if anything differs, a few keys per class."""
    from pyspark.sql import functions as F

    classes = (*FAILURES, PENDING)
    row_class = F.col(_CLASS)
    aggregates = [F.count(F.when(F.col(_IN_SOURCE), 1)).alias("rows_compared")]
    aggregates += [F.count(F.when(row_class == name, 1)).alias(name) for name in classes]
    with spark_errors("comparing the source with the destination", model, destination):
        totals = compared.agg(*aggregates).first().asDict()  # pyright: ignore[reportOptionalMemberAccess] (an aggregate has a row)
        counts = {name: int(value or 0) for name, value in totals.items()}
        examples = _examples(compared, model) if any(counts[name] for name in classes) else {}
    return counts, examples


def _examples(compared: DataFrame, model: ModelConfig) -> dict[str, list[str]]:
    """At most MAX_EXAMPLES keys per class, the smallest first (a top-k per class: Spark keeps
    k rows per class in each partition before the shuffle)."""
    from pyspark.sql import Window as SparkWindow
    from pyspark.sql import functions as F

    names = [c.destination_name for c in model.primary_key]
    key_columns = [_key_alias(i) for i in range(len(names))]
    by_key = SparkWindow.partitionBy(_CLASS).orderBy(*[F.col(k).asc_nulls_first() for k in key_columns])
    rows = (compared.where(F.col(_CLASS).isNotNull())
            .select(*key_columns, _CLASS)
            .withColumn(_RANK, F.row_number().over(by_key))
            .where(F.col(_RANK) <= MAX_EXAMPLES)
            .collect())
    examples: dict[str, list[str]] = {}
    for row in sorted(rows, key=lambda r: (r[_CLASS], r[_RANK])):
        text = ", ".join(f"{name}={row[alias]!r}" for name, alias in zip(names, key_columns, strict=True))
        examples.setdefault(row[_CLASS], []).append(text)
    return examples


@contextmanager
def spark_errors(doing: str, model: ModelConfig, destination: str) -> Iterator[None]:
    """A Spark failure (reads are lazy: most surface in the aggregation) as a ``DataError``
    naming what failed; anything else is a bug and goes through as it is."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        yield
    except (Py4JJavaError, PySparkException) as exc:
        raise DataError(
            f"integrity check: {doing} failed: {spark_error_reason(exc)}",
            model=model.model_name, destination=destination,
            fix="check that the source and the destination are reachable, that the destination "
                "table holds the model's primary key and last-modified columns, and that "
                "source_query runs",
        ) from None


# -- what a report says -----------------------------------------------------------------------


def full_refresh_command(destination: str, model: str) -> str:
    return (f"transfer-platform transfer {destination} --model {model} --full-refresh (or "
            "materialize the asset with the run tag transfer_platform/full_refresh=true)")


def describe(report: IntegrityReport, source_name: str) -> str:
    """What the report means and how to fix each class of failure, one sentence per class."""
    refresh = full_refresh_command(report.destination, report.model)
    where = f"model '{report.model}' -> destination '{report.destination}'"
    lookback = f"lookback_window of source '{source_name}' ({report.lookback_seconds} s)"
    lines = [f"{where}: {report.rows_compared} source row(s) compared"
             + (f", horizon {isoformat(report.horizon)}" if report.horizon else "")
             + (": passed." if report.passed else f": {report.failures} failure(s).")]
    if report.missing:
        lines.append(f"missing {report.missing}: source rows older than the horizon are not in the "
                     f"destination; the source committed them later than the {lookback} allows. "
                     f"Fix: raise lookback_window above the source's commit delay, then run a full "
                     f"refresh: {refresh}.")
    if report.stale:
        lines.append(f"stale {report.stale}: the destination holds an older version than the source "
                     f"(an update committed late by more than the {lookback}, or a NULL "
                     f"last-modified value in the source). Fix: raise lookback_window, then run a "
                     f"full refresh: {refresh}.")
    if report.incorrect:
        lines.append(f"incorrect {report.incorrect}: the destination holds a newer (or NULL) "
                     "last-modified value than the source, which transfers never write: something "
                     f"else writes to the destination table. Fix: stop that writer, then run a full "
                     f"refresh: {refresh}.")
    if report.orphaned:
        lines.append(f"orphaned {report.orphaned}: destination rows are no longer in the tenant's "
                     "source rows (deleted there, or moved to another tenant); incremental "
                     f"transfers do not propagate deletions. Fix: run a full refresh: {refresh}.")
    if report.horizon is None:
        lines.append("No transfer has committed a watermark yet: every difference is pending.")
    elif report.pending:
        lines.append(f"pending {report.pending}: differences on rows changed at or after the "
                     "horizon (the last delivered value, or the watermark if earlier, minus the "
                     "lookback: where the next read starts) are not due yet; the next "
                     "transfers deliver them. Not a failure.")
    return "\n".join(lines)
