"""Which columns of a delivered table a model's columns would add or drop, and the rule that a
column is dropped from a recipient's table only when the provider said so.

A destination column the model no longer has is dropped by an incremental transfer only with the
model's ``allow_column_drop: true``; a full refresh rebuilds the table with the model's columns
whatever the setting. Otherwise the transfer is refused before anything changes, naming the
column: a mistyped ``name_in_destination`` (or a column taken out of the model by mistake) must
never cost a recipient a column and its values.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from transfer_platform.errors import SchemaMismatch

if TYPE_CHECKING:
    from transfer_platform.config.models import ColumnConfig, ModelConfig


@dataclass(frozen=True)
class ColumnChanges:
    """What bringing a table's columns to the model's would do, in the model's (added) and the
    table's (dropped) order."""

    added: tuple[str, ...]
    dropped: tuple[str, ...]


def column_changes(existing: Sequence[str], wanted: Sequence[str]) -> ColumnChanges:
    """The columns of ``wanted`` that ``existing`` lacks, and those of ``existing`` not wanted."""
    have, want = set(existing), set(wanted)
    return ColumnChanges(tuple(c for c in wanted if c not in have), tuple(c for c in existing if c not in want))


def refuse_column_drops(model: str, destination: str, holder: str, dropped: Sequence[str], *,
                        allowed: bool) -> None:
    """Raise ``SchemaMismatch`` if ``dropped`` (columns of ``holder``, the delivered table or
    files, that the model no longer has) is not empty and the model does not allow drops."""
    if not dropped or allowed:
        return
    names = ", ".join(f"'{c}'" for c in dropped)
    raise SchemaMismatch(
        f"model '{model}' -> destination '{destination}': the model no longer has the column(s) {names} "
        f"of {holder}; a column is dropped from what a recipient holds only by a full refresh or with "
        f"allow_column_drop, so nothing was changed. Fix: if the column was renamed "
        f"or mistyped in the model, correct its name_in_source or name_in_destination; to drop it, "
        f"set allow_column_drop: true on model '{model}' (then transfer again), or run a full refresh: "
        f"transfer-platform transfer {destination} --model {model} --full-refresh")


def full_refresh_fix(destination: str, model: str) -> str:
    return f"run a full refresh: transfer-platform transfer {destination} --model {model} --full-refresh"


def plan_columns(model: ModelConfig, destination: str, table: str, existing: Mapping[str, str],
                 primary_key: Sequence[str], type_of: Callable[[ColumnConfig], str], *,
                 matches: Callable[[str, str], bool] = operator.eq) -> ColumnChanges:
    """What bringing a SQL destination's live ``table`` (``existing``: its columns and their types
    as the vendor names them; ``primary_key``: its key columns, sorted) to ``model``'s columns
    would do. A column whose type is not the model's (``type_of(column)``, compared by
    ``matches(expected, actual)``) or a primary key that is not the model's is refused with
    ``SchemaMismatch`` naming the full refresh that fixes it; a drop unless the model allows it."""
    where = f"model '{model.model_name}' -> destination '{destination}'"
    fix = full_refresh_fix(destination, model.model_name)
    for column in model.columns:
        expected, actual = type_of(column), existing.get(column.destination_name)
        if actual is not None and not matches(expected, actual):
            raise SchemaMismatch(
                f"{where}: column '{column.destination_name}' is {actual} in {table} but the model says "
                f"{column.data_type} ({expected}); a type is never changed in place. Fix: {fix}")
    wanted_key = sorted(c.destination_name for c in model.primary_key)
    if list(primary_key) != wanted_key:
        raise SchemaMismatch(
            f"{where}: the primary key of {table} is ({', '.join(primary_key)}) but the model's is "
            f"({', '.join(wanted_key)}). Fix: {fix}")
    planned = column_changes(list(existing), [c.destination_name for c in model.columns])
    refuse_column_drops(model.model_name, destination, table, planned.dropped, allowed=model.allow_column_drop)
    return planned


def change_sentences(table: str, added: Sequence[str], dropped: Sequence[str]) -> tuple[str, ...]:
    """What a transfer tells of the columns it added to (``added``: each a column, or a column and
    its type) and dropped from ``table``: one sentence per change."""
    return tuple([f"added column {column} to {table}; rows delivered before hold NULL in it until they "
                  "change or a full refresh runs" for column in added]
                 + [f"dropped column {column} from {table} (no longer in the model)" for column in dropped])
