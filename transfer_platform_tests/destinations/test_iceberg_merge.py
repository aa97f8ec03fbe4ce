"""The Iceberg writer's upsert in Arrow (``destinations/iceberg/merge.py``), as a recipient expects
it: a version not older replaces the held one; an older one read again changes nothing; soft
deletes remove; append-only models only insert; nothing changed means no file is rewritten."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from transfer_platform.config.models import ModelConfig
from transfer_platform.destinations.base import arrow_schema
from transfer_platform.destinations.iceberg.merge import merge_rows, without_versions

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def model(**settings) -> ModelConfig:
    return ModelConfig.model_validate({
        "model_name": "events", "source_name": "src", "source_table": "events",
        "columns": [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                    {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
                    {"name_in_source": "payload", "data_type": "string"},
                    {"name_in_source": "is_deleted", "data_type": "boolean", "is_deleted_marker": True}],
        **settings})


def rows(m: ModelConfig, *values: tuple) -> pa.Table:
    """(id, seconds after T0, payload[, deleted])."""
    return pa.Table.from_pylist([{"id": v[0], "updated_at": T0 + timedelta(seconds=v[1]), "payload": v[2],
                                  "is_deleted": v[3] if len(v) > 3 else False} for v in values],
                                schema=arrow_schema(m))


def held_after(result) -> list[tuple]:
    return sorted((r["id"], int((r["updated_at"] - T0).total_seconds()), r["payload"])
                  for r in result.rows.to_pylist())


HELD = ((1, 10, "a"), (2, 10, "b"))
CASES = {
    "a newer version replaces": ({}, [(1, 20, "a2")], [(1, 20, "a2"), (2, 10, "b")], True, 0),
    "an older version read again changes nothing": ({}, [(1, 5, "old")], [(1, 10, "a"), (2, 10, "b")], False, 0),
    "the same version again changes nothing": ({}, [(1, 10, "a")], [(1, 10, "a"), (2, 10, "b")], False, 0),
    "an equally new, different version replaces": ({}, [(1, 10, "a'")], [(1, 10, "a'"), (2, 10, "b")], True, 0),
    "a new key is inserted": ({}, [(3, 1, "c")], [(1, 10, "a"), (2, 10, "b"), (3, 1, "c")], True, 0),
    "append-only never replaces": ({"is_append_only": True}, [(1, 20, "a2"), (3, 1, "c")],
                                   [(1, 10, "a"), (2, 10, "b"), (3, 1, "c")], True, 0),
    "a soft delete not older removes": ({}, [(1, 10, "x", True)], [(2, 10, "b")], True, 1),
    "an older soft delete does not": ({}, [(1, 5, "x", True)], [(1, 10, "a"), (2, 10, "b")], False, 0),
    "a soft delete of a key not held inserts nothing": ({}, [(3, 5, "x", True)], [(1, 10, "a"), (2, 10, "b")],
                                                        False, 0),
    "kept soft deletes are rows": ({"keep_deleted_rows": True}, [(1, 20, "x", True)],
                                   [(1, 20, "x"), (2, 10, "b")], True, 0),
}


@pytest.mark.parametrize(("settings", "window", "want", "changed", "removed"), CASES.values(), ids=CASES.keys())
def test_the_upsert(settings, window, want, changed, removed) -> None:
    m = model(**settings)
    result = merge_rows(rows(m, *HELD), rows(m, *window), m)
    assert held_after(result) == want
    assert (result.changed, result.removed) == (changed, removed)


def test_into_nothing_held_every_row_not_deleted_is_inserted() -> None:
    m = model()
    result = merge_rows(arrow_schema(m).empty_table(), rows(m, (1, 1, "a"), (2, 1, "b", True)), m)
    assert held_after(result) == [(1, 1, "a")]
    assert result.changed


def test_the_sweep_removes_only_the_versions_it_names() -> None:
    m = model()
    gone = rows(m, (1, 10, "-"), (2, 9, "-")).select(["id", "updated_at"])  # 2 changed since: stays
    result = without_versions(rows(m, *HELD), gone, m)
    assert held_after(result) == [(2, 10, "b")]
    assert (result.changed, result.removed) == (True, 1)
