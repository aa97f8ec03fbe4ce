"""What every destination writer does, the choice of writer by vendor, and the checks every
writer applies to a batch (the Arrow ones here; a database writer runs the same rules in SQL)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.routes import Rows
from transfer_platform.core.types import TYPES
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import Window
from transfer_platform.errors import DataError, DuplicateKey
from transfer_platform.tuning import DEFAULT, Tuning

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.probes import Check
    from transfer_platform.sources.relay import RelayRead


@dataclass(frozen=True)
class WindowLoad:
    """One window's batch and what its commit must record."""

    model: ModelConfig
    transfer_id: str
    progress: Window  # the part of the configured range this batch completes
    configured_start: datetime
    into_refresh: bool = False  # a full refresh: load the table being built aside, not the live one
    read_from: datetime | None = None  # where the batch's read began (the lookback below progress included)


@dataclass(frozen=True)
class Prepared:
    """What a destination holds for a model when a transfer starts."""

    state: ModelState  # committed with the live table
    refresh: ModelState | None = None  # a full refresh being built aside (new or unfinished)
    schema_changes: tuple[str, ...] = ()  # columns added to or dropped from the live table


@dataclass(frozen=True)
class WindowResult:
    rows_transferred: int
    delta_rows_transferred: int
    volume_bytes: int
    max_last_modified: datetime | None
    state: ModelState  # the state committed with the data
    # rows the window removed because the source marks them deleted (or, with keep_deleted_rows,
    # rows it delivered newly marked deleted: newer than the previous high watermark)
    rows_deleted: int = 0
    # rows read but not delivered: a key's older versions and identical copies of the one delivered
    # (set by the transfer, which chooses one version per key before the writer sees the window)
    versions_superseded: int = 0


class DestinationWriter(Protocol):
    """What callers use of a writer. Every writer implements it as a subclass of
    ``destinations.skeleton.Writer``, which holds the order of ``prepare``, the window writes
    and ``publish_refresh`` once; a vendor implements its primitives."""

    name: str
    #: the forms of rows it takes (``transfer_platform/core/routes.py``): Spark rows and Arrow
    #: always; :attr:`Rows.COPY_STREAM` with :meth:`write_relayed` and :meth:`write_streamed`
    accepts: frozenset[Rows]

    def check(self) -> None:
        """Raise ``ConnectionFailure`` if the destination cannot be reached."""

    def close(self) -> None:
        """Release connections held for the transfer."""

    def prepare(self, model: ModelConfig, transfer_id: str, *, full_refresh: bool = False) -> Prepared:
        """Remove what dead transfers left in staging and return the model's committed state.

        ``full_refresh``: start building a new table aside (whatever was built aside before is
        dropped). Otherwise an unfinished full refresh is carried on; without one, the live table
        is created if needed and its columns follow the model (added, dropped; a changed type or
        primary key is refused with ``SchemaMismatch``)."""

    def committed_state(self, model: ModelConfig) -> Prepared:
        """The model's committed state as the next transfer would find it, read without side
        effects: nothing is created, altered, dropped or locked for writing (a dry run, integrity
        checks). ``state``: the live table's (empty if the destination, its schema or its status
        were never created); ``refresh``: the state an unfinished full refresh would be carried on
        from, else ``None`` (empty when the model's columns changed since it began: the next
        transfer starts it again); ``schema_changes`` is always empty (nothing is compared)."""

    def write_window(self, frame: DataFrame, load: WindowLoad) -> WindowResult:
        """Stage ``frame``, refuse it if it breaks a rule (NULL key, NULL last-modified, duplicate
        key), then merge it and record the new state in one commit; clean up staging either way."""

    def write_arrow(self, batch: pa.Table, load: WindowLoad) -> WindowResult:
        """:meth:`write_window` for a window already read into this process as Arrow (columns
        and types of :func:`arrow_schema`): a small window read together with its neighbours in
        one Spark job, so that it costs no Spark job of its own."""

    def write_relayed(self, relay: RelayRead, spark: SparkSession, load: WindowLoad) -> WindowResult:
        """:meth:`write_window` for a window relayed as a COPY stream by Spark's tasks
        (:mod:`transfer_platform.sources.relay`): a writer that accepts :attr:`Rows.COPY_STREAM`."""

    def write_streamed(self, stream: Callable[[dict[str, str]], Iterable[bytes]], load: WindowLoad) -> WindowResult:
        """:meth:`write_arrow` for a small window streamed as a COPY stream by this process
        (``stream(types)``: its chunks, each value cast to the staging column's type in
        ``types``): a writer that accepts :attr:`Rows.COPY_STREAM`."""

    def write_empty(self, load: WindowLoad) -> WindowResult:
        """Record a window in which the source holds no row (asked before it was read): the state
        moves on in one commit, as :meth:`write_window` of no rows would, with no Spark job and
        no staging."""

    def publish_refresh(self, model: ModelConfig, transfer_id: str) -> ModelState:
        """Replace the live table by the one built aside, and its state by the refresh's, in one
        commit: readers see the old table until then, never an empty or half-built one."""

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """The delivered table as a Spark DataFrame."""

    def has_table(self, model: ModelConfig) -> bool:
        """Whether :meth:`read_table` has a delivered table to read, found without side effects
        (integrity checks and the delete sweep treat a destination without one as empty)."""

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """Hold the model's lock in the destination until :meth:`close` (``prepare`` takes it):
        one transfer or delete sweep of a model at a time, however it was started; raises
        ``TransferRunning`` after a short wait."""

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        """Remove the rows whose primary key and last-modified value ``frame`` holds, without
        holding them all in memory; returns how many were removed."""

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        """``test-connection``: reach, log in, then try everything a transfer of ``models`` does
        here (create, write, alter, rename, drop; or write, rename, delete files), undoing each at
        once; one :class:`Check` per step, a failure with its grant or setting."""


def writer_for(destination, tuning: Tuning = DEFAULT) -> DestinationWriter:  # any configured destination
    """The writer of a configured destination, by its vendor (``transfer_platform/vendors/``),
    with the sizes and waits of ``tuning``. Every writer is a ``destinations.skeleton.Writer``."""
    from transfer_platform.network.addresses import guard
    from transfer_platform.vendors import DESTINATIONS, implementation

    guard(destination)  # its addresses checked before anything connects (network/addresses.py)
    return implementation(DESTINATIONS, "destination", destination, tuning)


def staging_suffix(model_name: str, transfer_id: str) -> str:
    """A short, stable suffix for a model's staging objects: ``<model hash>_<transfer>``."""
    model_hash = hashlib.sha1(model_name.encode()).hexdigest()[:10]
    safe_id = "".join(ch for ch in transfer_id if ch.isalnum())[:12].lower()
    return f"{model_hash}_{safe_id}"


def offending_key(model: ModelConfig, values: dict) -> str:
    return ", ".join(f"{c.destination_name}={values.get(c.destination_name)!r}" for c in model.primary_key)


def null_key_error(model: ModelConfig, destination: str, column: str, key_values: dict) -> DataError:
    # a NULL key never matches an existing row: each re-read would add another copy
    return DataError(
        f"a row has a NULL primary key value ({column}) at key {offending_key(model, key_values)}",
        model=model.model_name, destination=destination,
        fix=f"give {column} a value in every source row, or mark the right columns with is_primary_key",
    )


def null_last_modified_error(model: ModelConfig, destination: str, key_values: dict) -> DataError:
    lm_name = model.last_modified.destination_name
    return DataError(
        f"a row has a NULL last-modified value ({lm_name}) at key {offending_key(model, key_values)}",
        model=model.model_name, destination=destination,
        fix=f"give every row a {lm_name} value in the source (NULLs cannot be transferred incrementally)",
    )


def duplicate_key_error(model: ModelConfig, destination: str, key_values: dict, count: int) -> DuplicateKey:
    return DuplicateKey(
        f"duplicate primary key in one batch: {offending_key(model, key_values)} appears {count} times",
        model=model.model_name, destination=destination,
        fix="make the primary key unique per tenant in the source, or mark the right columns "
            "with is_primary_key",
        key_values={c.destination_name: key_values.get(c.destination_name) for c in model.primary_key},
    )


# -- a batch in Arrow: its schema, the rules it must keep, what it changes -------------------------

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


def refuse_bad_rows(batch: pa.Table, model: ModelConfig, destination: str) -> None:
    """Raise ``DataError`` for a NULL key, a NULL last-modified value or a key twice in ``batch``."""
    keys = [c.destination_name for c in model.primary_key]
    lm_name = model.last_modified.destination_name
    for key in keys:
        null_keys = batch.filter(pc.is_null(batch.column(key)))
        if null_keys.num_rows:
            raise null_key_error(model, destination, key, {k: null_keys.column(k)[0].as_py() for k in keys})
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


def batch_changes(batch: pa.Table, model: ModelConfig, state: ModelState) -> tuple[datetime | None, int]:
    """(the batch's largest last-modified moment, its rows newer than the state's high watermark:
    the delta rows; all of them before the first delivery)."""
    if not batch.num_rows:
        return None, 0
    lm_values = batch.column(model.last_modified.destination_name)
    kind = model.change_column  # an epoch, a date or text: compared as the column's values
    high = pc.max(lm_values).as_py()  # None when every value is NULL (refused by the caller's checks)
    max_lm = None if high is None else kind.moment(high)
    if state.high_watermark is None:
        return max_lm, batch.num_rows
    newer = pc.greater(lm_values, pa.scalar(kind.value(state.high_watermark), lm_values.type))
    return max_lm, int(pc.sum(newer).as_py() or 0)


def marked_mask(batch: pa.Table, model: ModelConfig) -> pa.ChunkedArray:
    """Which rows of ``batch`` are marked deleted (a boolean marker true, a timestamp marker set;
    as :func:`transfer_platform.core.sql.marked_deleted`). The model has a deletion marker."""
    marker = model.deletion_marker
    marks = batch.column(marker.destination_name)
    return pc.fill_null(marks, False) if marker.data_type == "boolean" else pc.is_valid(marks)


def newly_marked(batch: pa.Table, model: ModelConfig, state: ModelState) -> int:
    """Rows of ``batch`` marked deleted and newer than the state's high watermark (all marked
    rows before the first delivery): the soft deletes a batch delivers."""
    if model.deletion_marker is None or not batch.num_rows:
        return 0
    flagged = marked_mask(batch, model)
    if state.high_watermark is not None:
        lm_values = batch.column(model.last_modified.destination_name)
        bound = pa.scalar(model.change_column.value(state.high_watermark), lm_values.type)
        flagged = pc.and_(flagged, pc.greater(lm_values, bound))
    return int(pc.sum(flagged).as_py() or 0)


def empty_frame(spark: SparkSession, model: ModelConfig) -> DataFrame:
    """No rows, with the model's columns in Spark's types (Spark reads no schema from zero files)."""
    ddl = ", ".join(f"`{c.destination_name}` {TYPES[c.data_type].spark}" for c in model.columns)
    return spark.createDataFrame([], ddl)


def conformed(rows: pa.Table | pa.RecordBatch, schema: pa.Schema):  # -> rows' type
    """``rows`` with ``schema``'s columns and types (a column it lacks is NULL)."""
    columns = [rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
               for f in schema]
    return type(rows).from_arrays(columns, schema=schema)


def frame_batches(frame: DataFrame, schema: pa.Schema, size: int) -> Iterator[pa.Table]:
    """``frame``'s rows as Arrow tables of at most ``size`` rows, one Spark partition at a time."""
    rows = []
    for row in frame.toLocalIterator():
        rows.append(row.asDict())
        if len(rows) >= size:
            yield pa.Table.from_pylist(rows, schema=schema)
            rows = []
    if rows:
        yield pa.Table.from_pylist(rows, schema=schema)
