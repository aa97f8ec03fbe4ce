"""Renaming and casting a source frame to the model's columns, with names that are SQL syntax."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from transfer_platform.config.models import ColumnConfig, ModelConfig
from transfer_platform.sources.base import to_model_columns

pytestmark = pytest.mark.integration


def test_odd_names_are_renamed_and_cast_not_parsed(spark) -> None:
    frame = spark.createDataFrame(
        [(1, "2025-01-02 03:04:05.123456", "1.5", "x", '{"a": 1}')],
        "`we``ird.id` int, `updated at` string, `price) AS x, (y` string, `a.b` string, doc string",
    )
    model = ModelConfig(model_name="m", source_name="s", source_table="t", columns=[
        ColumnConfig(name_in_source="we`ird.id", name_in_destination="id", data_type="integer",
                     is_primary_key=True),
        ColumnConfig(name_in_source="updated at", data_type="timestamp", is_last_modified=True),
        ColumnConfig(name_in_source="price) AS x, (y", name_in_destination="pr`ice", data_type="decimal"),
        ColumnConfig(name_in_source="a.b", data_type="string"),
        ColumnConfig(name_in_source="doc", data_type="json"),
    ])
    out = to_model_columns(frame, model)
    assert out.columns == ["id", "updated at", "pr`ice", "a.b", "doc"]
    assert [f.dataType.simpleString() for f in out.schema.fields] == [
        "bigint", "timestamp", "decimal(38,9)", "string", "string"]
    (row,) = out.collect()
    assert row[0] == 1
    assert row[1].replace(tzinfo=UTC) == datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert row[2] == Decimal("1.500000000")
    assert (row[3], row[4]) == ("x", '{"a": 1}')
