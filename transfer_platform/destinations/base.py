"""What callers use of a destination writer, the choice of writer by vendor, and the checks every
writer applies to a batch (the Arrow ones here; a database writer runs the same rules in SQL)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.types import TYPES
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.skeleton import Prepared as Prepared
from transfer_platform.destinations.skeleton import WindowLoad as WindowLoad
from transfer_platform.destinations.skeleton import WindowResult as WindowResult
from transfer_platform.destinations.skeleton import Writer
from transfer_platform.errors import DataError, DuplicateKey
from transfer_platform.tuning import DEFAULT, Tuning

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


#: what callers use of a writer: every writer is a ``destinations.skeleton.Writer``, which holds the
#: order of ``prepare``, the window writes and ``publish_refresh`` once; a vendor implements its
#: primitives
DestinationWriter = Writer


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


def typed(table: pa.Table, model: ModelConfig) -> pa.Table:
    """``table`` with each of the model's columns cast to its :func:`arrow_schema` type (others as they are)."""
    wanted = arrow_schema(model)
    return table.cast(pa.schema([wanted.field(f.name) if f.name in wanted.names else f for f in table.schema]))


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
