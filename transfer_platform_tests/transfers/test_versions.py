"""One version per key in a window (the reference: "duplicates resolved via the last modified
timestamp"), in Arrow, without Spark: a table of cases."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from transfer_platform.config.models import ColumnConfig, ModelConfig
from transfer_platform.destinations.base import arrow_schema
from transfer_platform.errors import DataError
from transfer_platform.sources.base import ORIGIN_COLUMN
from transfer_platform.transfers.versions import latest_versions, show_origin

T1, T2, T3 = (datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in (1, 2, 3))


def model() -> ModelConfig:
    return ModelConfig(model_name="items", source_name="lake", source_table="items", columns=[
        ColumnConfig(name_in_source="id", data_type="integer", is_primary_key=True),
        ColumnConfig(name_in_source="org", data_type="string", is_primary_key=True),
        ColumnConfig(name_in_source="updated_at", data_type="timestamp", is_last_modified=True),
        ColumnConfig(name_in_source="v", data_type="string"),
        ColumnConfig(name_in_source="x", data_type="float")])


def table(rows: list[tuple], *, origin: bool = False) -> pa.Table:
    names = ["id", "org", "updated_at", "v", "x"]
    found = pa.Table.from_pylist([dict(zip(names, r[:5], strict=True)) for r in rows], schema=arrow_schema(model()))
    if origin:
        found = found.append_column(ORIGIN_COLUMN, pa.array([r[5] for r in rows], pa.string()))
    return found


def delivered(resolved) -> list[tuple]:
    return sorted(((r["id"], r["org"], r["updated_at"], r["v"]) for r in resolved.table.to_pylist()), key=order)


def order(row: tuple) -> tuple:
    return row[0] is None, row[0] or 0, row[1], row[2] is None, row[2] or T1


CASES = [
    # id, rows, delivered, older versions, identical copies
    ("no-repeat", [(1, "a", T1, "x", 1.0), (2, "a", T1, "y", 1.0)],
     [(1, "a", T1, "x"), (2, "a", T1, "y")], 0, 0),
    ("two-versions-later-second", [(1, "a", T1, "old", 1.0), (1, "a", T2, "new", 1.0)],
     [(1, "a", T2, "new")], 1, 0),
    ("two-versions-later-first", [(1, "a", T2, "new", 1.0), (1, "a", T1, "old", 1.0)],
     [(1, "a", T2, "new")], 1, 0),
    ("three-versions", [(1, "a", T2, "mid", 1.0), (1, "a", T3, "new", 1.0), (1, "a", T1, "old", 1.0),
                        (2, "a", T1, "other", 1.0)],
     [(1, "a", T3, "new"), (2, "a", T1, "other")], 2, 0),
    ("same-id-other-org-is-another-key", [(1, "a", T1, "x", 1.0), (1, "b", T2, "y", 1.0)],
     [(1, "a", T1, "x"), (1, "b", T2, "y")], 0, 0),
    ("identical-copy", [(1, "a", T2, "same", 1.0), (1, "a", T2, "same", 1.0)],
     [(1, "a", T2, "same")], 0, 1),
    ("identical-copies-of-the-latest-and-an-older", [(1, "a", T2, "s", None), (1, "a", T1, "o", 1.0),
                                                     (1, "a", T2, "s", None)],
     [(1, "a", T2, "s")], 1, 1),
    ("nan-equals-nan", [(1, "a", T2, "s", float("nan")), (1, "a", T2, "s", float("nan"))],
     [(1, "a", T2, "s")], 0, 1),
    ("null-last-modified-kept-for-the-destination-to-refuse", [(1, "a", T2, "s", 1.0), (1, "a", None, "n", 1.0)],
     [(1, "a", T2, "s"), (1, "a", None, "n")], 0, 0),
]


@pytest.mark.parametrize(("rows", "expected", "older", "copies"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_latest_version_of_each_key_is_delivered(rows, expected, older, copies):
    resolved = latest_versions(table(rows), model(), "dest")
    assert delivered(resolved) == sorted(expected, key=order)
    assert (resolved.older_versions, resolved.identical_copies) == (older, copies)
    assert resolved.superseded == len(rows) - len(expected)


def test_a_null_key_is_kept_for_the_destination_to_refuse():
    rows = table([(None, "a", T1, "p", 1.0), (None, "a", T2, "q", 1.0)])
    assert latest_versions(rows, model(), "dest").table.num_rows == 2


def test_a_conflict_names_key_last_modified_value_and_both_files():
    rows = table([(7, "a", T1, "old", 1.0, "file:/lake/items/part-0.parquet"),
                  (7, "a", T2, "one", 1.0, "file:/lake/items/part%201.parquet"),
                  (7, "a", T2, "two", 1.0, "s3://bucket/items/part-2.parquet")], origin=True)
    with pytest.raises(DataError) as refused:
        latest_versions(rows, model(), "dest")
    message = str(refused.value)
    assert "model 'items' -> destination 'dest'" in message
    assert "key id=7, org='a'" in message
    assert f"updated_at={T2.isoformat()}" in message
    assert "/lake/items/part 1.parquet" in message
    assert "s3://bucket/items/part-2.parquet" in message
    assert "they differ in v" in message
    assert "part-0" not in message  # the older version is not part of the conflict


def test_a_conflict_without_files_names_the_two_rows_values():
    rows = table([(7, "a", T2, "one", 1.0), (7, "a", T2, "two", 2.0)])
    with pytest.raises(DataError) as refused:
        latest_versions(rows, model(), "dest")
    message = str(refused.value)
    assert "key id=7, org='a'" in message
    assert f"updated_at={T2.isoformat()}" in message
    assert "v='one', x=1.0" in message
    assert "v='two', x=2.0" in message


def test_origins_are_shown_as_paths():
    assert show_origin("file:/tmp/a%20b/p.parquet") == "/tmp/a b/p.parquet"
    assert show_origin("s3://b/k.parquet") == "s3://b/k.parquet"
    assert show_origin(None) is None


def test_the_rows_superseded_are_added_up_per_partition_and_reported_to_dagster():
    from transfer_platform.core.planning import PlannedWindow
    from transfer_platform.core.watermarks import ModelState
    from transfer_platform.core.windows import ReadBounds, Window
    from transfer_platform.destinations.base import WindowResult
    from transfer_platform.orchestration.catalog.reporting import window_metadata
    from transfer_platform.transfers.outcomes import ModelSummary, PartitionTally, WindowOutcome

    partition = Window(T1, T3)
    chunks = [Window(T1, T2), Window(T2, T3)]
    tally, summary, done = PartitionTally(), ModelSummary("items"), None
    for chunk, superseded in zip(chunks, (2, 3), strict=True):
        outcome = WindowOutcome(PlannedWindow(partition, ReadBounds(chunk.start, chunk.end, chunk), chunk == chunks[-1]),
                                WindowResult(1, 1, 10, None, ModelState(), versions_superseded=superseded), None)
        summary.add(outcome)
        done = tally.add(outcome)
    assert done is not None
    assert window_metadata(done, "t1")["versions_superseded"].value == 5
    assert summary.as_dict()["versions_superseded"] == 5
