"""The upsert of a window into the rows an Iceberg table holds for the window's keys, in Arrow
(no catalog, no files): which rows stay, which are replaced, which are removed.

A window's row replaces the held row of its key when it is not older (its last-modified value is
greater or equal: two versions inside one tick of a coarse column both land); an older version
read again inside the lookback never replaces a newer one. An ``is_append_only`` model's window
only inserts keys not held. A row marked deleted (a soft delete, when the model removes them)
removes the held row under the same rule and is never inserted. When nothing would change (every
winner equal to the row it replaces), the caller writes no data file at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from transfer_platform.config.models import ModelConfig
from transfer_platform.destinations.base import marked_mask

_NEW, _OLD, _OLD_LM = "__tp_new", "__tp_old", "__tp_old_lm"


@dataclass(frozen=True)
class Merged:
    rows: pa.Table  # what the table holds for the window's keys afterwards
    changed: bool  # whether ``rows`` differ from what was held
    removed: int  # held rows removed by soft deletes


def merge_rows(held: pa.Table, window: pa.Table, model: ModelConfig) -> Merged:
    """``held`` (the table's rows of the window's keys) after ``window`` (checked: one row per
    key, no NULL key or last-modified value); both with the model's columns."""
    keys = [c.destination_name for c in model.primary_key]
    lm = model.last_modified.destination_name
    if held.num_rows:
        held = held.select(window.schema.names).cast(window.schema)
    new = window.select([*keys, lm]).append_column(_NEW, pa.array(range(window.num_rows), pa.int64()))
    old = (held.select([*keys, lm]).rename_columns([*keys, _OLD_LM])
           .append_column(_OLD, pa.array(range(held.num_rows), pa.int64())))
    joined = new.join(old, keys=keys, join_type="left outer") if held.num_rows else new.append_column(
        _OLD, pa.nulls(new.num_rows, pa.int64())).append_column(_OLD_LM, pa.nulls(new.num_rows, new.schema.field(lm).type))
    is_new = pc.is_null(joined.column(_OLD))
    if model.is_append_only:
        wins = is_new
    else:
        wins = pc.or_(is_new, pc.fill_null(pc.greater_equal(joined.column(lm), joined.column(_OLD_LM)), False))
    winners = joined.filter(wins)
    delivered = window.take(winners.column(_NEW))
    replacing = winners.filter(pc.is_valid(winners.column(_OLD)))
    replaced = replacing.column(_OLD)
    marked = None
    if model.removes_deleted_rows and delivered.num_rows:
        marked = marked_mask(delivered, model)
        delivered = delivered.filter(pc.invert(marked))
    removed = 0
    if model.removes_deleted_rows and replacing.num_rows:
        removed = int(pc.sum(marked_mask(window.take(replacing.column(_NEW)), model)).as_py() or 0)
    kept = held.filter(pc.invert(pc.is_in(pa.array(range(held.num_rows), pa.int64()),
                                          value_set=replaced.combine_chunks()))) if held.num_rows else held
    rows = pa.concat_tables([kept, delivered]) if held.num_rows else delivered
    inserted = int(pc.sum(pc.is_null(winners.column(_OLD))).as_py() or 0) - (
        0 if marked is None else int(pc.sum(pc.and_(marked, pc.is_null(winners.column(_OLD)))).as_py() or 0))
    changed = bool(inserted or removed or _differ(window.take(replacing.column(_NEW)),
                                                  held.take(replaced) if held.num_rows else held))
    return Merged(rows, changed, removed)


def _differ(a: pa.Table, b: pa.Table) -> bool:
    """Whether two aligned tables differ anywhere (NULL equal to NULL)."""
    if not a.num_rows:
        return False
    for name in a.schema.names:
        x, y = a.column(name), b.column(name)
        same = pc.or_(pc.fill_null(pc.equal(x, y), False), pc.and_(pc.is_null(x), pc.is_null(y)))
        if not pc.all(same).as_py():
            return True
    return False


def without_versions(held: pa.Table, gone: pa.Table, model: ModelConfig) -> Merged:
    """``held`` without the rows whose key and last-modified value ``gone`` holds (the delete
    sweep: a row that changed since is left alone)."""
    match = [c.destination_name for c in model.primary_key] + [model.last_modified.destination_name]
    if not held.num_rows or not gone.num_rows:
        return Merged(held, False, 0)
    index = held.select(match).append_column(_OLD, pa.array(range(held.num_rows), pa.int64()))
    found = index.join(gone.select(match).cast(held.select(match).schema), keys=match, join_type="inner")
    drop = found.column(_OLD).combine_chunks()
    rows = held.filter(pc.invert(pc.is_in(pa.array(range(held.num_rows), pa.int64()), value_set=drop)))
    removed = held.num_rows - rows.num_rows
    return Merged(rows, bool(removed), removed)
