"""One version of each row per window, chosen by its last-modified value, before any
destination sees the window.

A source can return a primary key more than once in one window: a Parquet lake is append-only,
so a row that changed twice inside the lookback comes back from two files; a ``source_query``
with a join can return a key twice. Duplicates are "resolved via the last modified timestamp"
(the reference): per key, the row with the latest last-modified value is delivered and the older
versions are superseded; copies of that latest row identical in every column (a file copied
twice) are delivered once. Two rows of one key with the same, latest last-modified value and
different values are a conflict no timestamp resolves: the window is refused, naming the key,
the value, and the two rows' files (a lake) or the columns in which they differ and both rows'
values there (a source without files).

The same rule in two forms: :func:`latest_versions` for a window in this process as Arrow (a
conflict raises at once), :func:`latest_versions_frame` for a window that Spark's executors stage
(a conflict is left for the destination's duplicate-key check, which refuses the window before
anything is written; :func:`conflict_of` then names it from the rows themselves).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.compute as _compute

from transfer_platform.config.models import ModelConfig
from transfer_platform.errors import DataError, DuplicateKey
from transfer_platform.sources.base import ORIGIN_COLUMN, spark_col

pc: Any = _compute  # pyarrow.compute's functions are made at import time: a type checker sees none

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation

#: a value shown in a conflict is cut to this many characters
_SHOWN_CHARACTERS = 80


@dataclass(frozen=True)
class Resolved:
    """A window's rows, one per key, and what was left out."""

    table: pa.Table
    older_versions: int = 0  # rows of a key that also came with a later last-modified value
    identical_copies: int = 0  # rows equal in every column to one delivered

    @property
    def superseded(self) -> int:
        """The rows read but not delivered."""
        return self.older_versions + self.identical_copies


def latest_versions(table: pa.Table, model: ModelConfig, destination: str) -> Resolved:
    """``table`` (the model's columns, and ``ORIGIN_COLUMN`` if known) with one row per primary
    key: the latest by last-modified value. A NULL key or last-modified value is kept (the
    destination refuses it by name). Raises :class:`DataError` for a conflict."""
    keys = [c.destination_name for c in model.primary_key]
    if table.num_rows < 2 or not _repeats(table, keys):
        return Resolved(table)
    lm_name = model.last_modified.destination_name
    order = pc.sort_indices(table, sort_keys=[(k, "ascending", "at_end") for k in keys]
                            + [(lm_name, "descending", "at_end")])
    rows = table.take(order)
    same_key = _equal_to_previous(rows, keys, nulls_equal=False)
    positions = pa.array(range(rows.num_rows), pa.int64())
    first_of_key = pc.fill_null_forward(pc.if_else(same_key, pa.nulls(rows.num_rows, pa.int64()), positions))
    lm = rows.column(lm_name).combine_chunks()
    latest = lm.take(first_of_key)
    older = pc.and_(same_key, pc.fill_null(pc.less(lm, latest), False))
    tied = pc.and_(same_key, pc.fill_null(pc.equal(lm, latest), False))  # sorted: right after the latest
    values = [c.destination_name for c in model.columns]
    identical = _equal_to_previous(rows, values, nulls_equal=True)
    conflicts = pc.and_(tied, pc.invert(identical))
    if pc.any(conflicts).as_py():
        at = pc.index(conflicts, True).as_py()
        first, second = rows.slice(at - 1, 1).to_pylist()[0], rows.slice(at, 1).to_pylist()[0]
        raise version_conflict(model, destination, first, second)
    copies = pc.and_(tied, identical)
    left_out = pc.or_(older, copies)
    return Resolved(rows.filter(pc.invert(left_out)), int(pc.sum(older).as_py() or 0),
                    int(pc.sum(copies).as_py() or 0))


def _repeats(table: pa.Table, keys: list[str]) -> bool:
    """Whether a key occurs twice (NULL counts as a value). One key column: its distinct count (a
    hash of one array, without the group-by's query engine)."""
    if len(keys) == 1:
        return pc.count_distinct(table.column(keys[0]), mode="all").as_py() < table.num_rows
    counts = table.group_by(keys).aggregate([(keys[0], "count", pc.CountOptions(mode="all"))])
    return counts.num_rows < table.num_rows


def _equal_to_previous(rows: pa.Table, columns: list[str], *, nulls_equal: bool) -> pa.Array:
    """Per row: whether each of ``columns`` equals the row's before it (never for the first)."""
    equal = None
    for name in columns:
        column = rows.column(name).combine_chunks()
        previous = pa.concat_arrays([pa.nulls(1, column.type), column.slice(0, len(column) - 1)])
        same = pc.fill_null(pc.equal(column, previous), False)
        if nulls_equal:
            both_null = pc.and_(pc.is_null(column), pc.is_null(previous))
            if pa.types.is_floating(column.type):
                both_null = pc.or_(both_null, pc.fill_null(pc.and_(pc.is_nan(column), pc.is_nan(previous)), False))
            same = pc.or_(same, both_null)
        equal = same if equal is None else pc.and_(equal, same)
    first = pa.array([False] + [True] * (rows.num_rows - 1))
    return pc.and_(equal, first)


def version_conflict(model: ModelConfig, destination: str, first: dict[str, Any], second: dict[str, Any]) -> DataError:
    """Two rows of one key with the same, latest last-modified value and different values."""
    keys = ", ".join(f"{c.destination_name}={_value(first.get(c.destination_name))}" for c in model.primary_key)
    lm = model.last_modified.destination_name
    differ = [c.destination_name for c in model.columns if first.get(c.destination_name) != second.get(c.destination_name)]
    origins = sorted(o for o in {show_origin(first.get(ORIGIN_COLUMN)), show_origin(second.get(ORIGIN_COLUMN))}
                     if o is not None)
    if origins:
        where = (f"in files {origins[0]} and {origins[1]}" if len(origins) == 2
                 else f"both in file {origins[0]}")
        detail = f"{where}; they differ in {', '.join(differ)}"
    else:
        detail = (f"their values differ: ({_shown(first, differ)}) and ({_shown(second, differ)})")
    return DataError(
        f"two different versions of key {keys} have the same, latest last-modified value "
        f"{lm}={_value(first.get(lm))} {detail}: which one is current cannot be told",
        model=model.model_name, destination=destination,
        fix=f"keep one row per key and {lm} value in the source (delete or correct one of the two, "
            f"or give the newer one a later {lm})",
    )


def _value(value: Any) -> str:
    """A value as a message shows it: a moment in ISO-8601, else as Python writes it, cut short."""
    text = value.isoformat() if isinstance(value, datetime | date) else repr(value)
    return text if len(text) <= _SHOWN_CHARACTERS else text[:_SHOWN_CHARACTERS - 3] + "..."


def _shown(row: dict[str, Any], columns: list[str]) -> str:
    return ", ".join(f"{name}={_value(row.get(name))}" for name in columns)


def show_origin(origin: str | None) -> str | None:
    """A row's origin as a person names it: a local file's path (Spark writes ``file:`` URIs)."""
    if origin is None or not origin.startswith("file:"):
        return origin
    return unquote(urlsplit(origin).path)


# -- the same rule for a window that Spark stages ------------------------------------------------

_LATEST, _HASH, _PREVIOUS_LM, _PREVIOUS_HASH = "__tp_latest", "__tp_hash", "__tp_previous_lm", "__tp_previous_hash"


@dataclass(frozen=True)
class ResolvedFrame:
    """:func:`latest_versions_frame`'s answer: the rows to deliver (the model's columns, and
    ``ORIGIN_COLUMN`` if the read had it) and what it counts once Spark has run them."""

    frame: DataFrame
    observation: Observation | None

    def delivered(self, model: ModelConfig) -> DataFrame:
        """The model's columns only: what a destination stages."""
        return self.frame.select(*[spark_col(c.destination_name) for c in model.columns])

    def counts(self) -> tuple[int, int]:
        """(older versions, identical copies) left out; only once an action ran the frame (the
        destination's staging), else a local session waits for one."""
        if self.observation is None:
            return 0, 0
        found = self.observation.get
        return int(found.get("older_versions") or 0), int(found.get("identical_copies") or 0)


def latest_versions_frame(frame: DataFrame, model: ModelConfig, *, counted: bool = True) -> ResolvedFrame:
    """:func:`latest_versions` in Spark, for a window its executors stage: per key, ordered by
    last-modified value (latest first) and a hash of the row, a row is left out if it is older
    than the key's first or equal to the row before it in every column (its hash and
    last-modified value). Rows of a conflict are all kept, so the destination's duplicate-key
    check refuses the window before anything is written. One window partitioned by the key:
    the shuffle the staging's own partitioning by key then reuses. ``counted``: observe how many
    rows were left out (:meth:`ResolvedFrame.counts`)."""
    from pyspark.sql import Observation, Window
    from pyspark.sql import functions as F

    keys = [spark_col(c.destination_name) for c in model.primary_key]
    lm = spark_col(model.last_modified.destination_name)
    row_hash = F.xxhash64(*[spark_col(c.destination_name) for c in model.columns])
    ordered = Window.partitionBy(*keys).orderBy(lm.desc_nulls_last(), F.col(_HASH))
    marked = (frame.withColumn(_HASH, row_hash)
              .withColumn(_LATEST, F.first(lm).over(ordered))
              .withColumn(_PREVIOUS_LM, F.lag(lm).over(ordered))
              .withColumn(_PREVIOUS_HASH, F.lag(F.col(_HASH)).over(ordered)))
    older = F.coalesce(lm < F.col(_LATEST), F.lit(False))
    copy = F.coalesce((lm == F.col(_PREVIOUS_LM)) & (F.col(_HASH) == F.col(_PREVIOUS_HASH)), F.lit(False))
    observation = Observation() if counted else None
    if observation is not None:
        marked = marked.observe(observation, F.sum(F.when(older, 1).otherwise(0)).alias("older_versions"),
                                F.sum(F.when(~older & copy, 1).otherwise(0)).alias("identical_copies"))
    kept = marked.where(~(older | copy)).drop(_HASH, _LATEST, _PREVIOUS_LM, _PREVIOUS_HASH)
    return ResolvedFrame(kept, observation)


def conflict_of(resolved: ResolvedFrame, model: ModelConfig, duplicate: DuplicateKey) -> DataError | None:
    """The conflict behind a destination's refusal of a key twice in a window resolved by
    :func:`latest_versions_frame` (its rows read again, for that key only), or ``None``."""
    from functools import reduce

    from pyspark.sql import functions as F

    matches = [spark_col(name) == F.lit(value) for name, value in duplicate.key_values.items()]
    if not matches or any(value is None for value in duplicate.key_values.values()):
        return None
    rows = resolved.frame.where(reduce(lambda a, b: a & b, matches)).toArrow()
    try:
        latest_versions(rows, model, duplicate.destination)
    except DataError as conflict:
        return conflict
    return None
