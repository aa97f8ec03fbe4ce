"""A window's rows as the CSV text a BigQuery load job reads exactly, and a table's rows read back.

Every value becomes text in one CSV line: a string or JSON value as a JSON string literal (a
newline inside it is ``\\n``: BigQuery's CSV needs ``allowQuotedNewlines`` for a raw one, which the
emulator the tests use refuses; the dialect's ``JSON_VALUE(x, '$')`` reads it back exactly),
a timestamp as ISO 8601 in UTC to the microsecond, a boolean as ``true``/``false``, a decimal and
a float as their exact text; NULL as an empty field (a string is never empty: ``""`` at least).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from transfer_platform.config.models import ColumnConfig
    from transfer_platform.destinations.bigquery.client import BigquerySession


def _text(column: pa.ChunkedArray | pa.Array, data_type: str) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc

    if data_type in ("string", "json"):
        return pa.array([None if v is None else json.dumps(v, ensure_ascii=False) for v in column.to_pylist()],
                        pa.string())
    if data_type == "timestamp":
        text = pc.strftime(column.cast(pa.timestamp("us", tz="UTC")), format="%Y-%m-%dT%H:%M:%S")
        return pc.binary_join_element_wise(text, pa.scalar("Z"), "")
    if data_type == "float":
        return pa.array([None if v is None else repr(float(v)) for v in column.to_pylist()], pa.string())
    if data_type == "boolean":
        return pc.if_else(column, "true", "false")
    return column.cast(pa.string())


def write_csv(batches: Iterable[pa.Table | pa.RecordBatch], columns: list[ColumnConfig], path: str) -> int:
    """``batches`` appended to the CSV file ``path`` (no header); its size in bytes (0: no row)."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    names = [c.destination_name for c in columns]
    schema = pa.schema([(n, pa.string()) for n in names])
    rows = 0
    with pa_csv.CSVWriter(path, schema, write_options=pa_csv.WriteOptions(include_header=False,
                                                                         quoting_style="needed")) as writer:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            rows += batch.num_rows
            writer.write_table(pa.Table.from_arrays([_text(batch.column(n), c.data_type)
                                                     for n, c in zip(names, columns, strict=True)], schema=schema))
    return os.path.getsize(path) if rows else 0


def read_rows(session: BigquerySession, table: str, columns: list[ColumnConfig]) -> list[dict[str, Any]]:
    """The table's rows as Python values of the model's types (JSON as its text, NUMERIC read as
    text: exact)."""
    from transfer_platform.destinations.bigquery.dialect import q

    def select(c: ColumnConfig) -> str:
        name = q(c.destination_name)
        if c.data_type == "json":
            return f"TO_JSON_STRING({name})"
        return f"CAST({name} AS STRING)" if c.data_type == "decimal" else name

    rows = session.all(f"SELECT {', '.join(select(c) for c in columns)} FROM {table}")
    decimal = [c.data_type == "decimal" for c in columns]
    return [{c.destination_name: (Decimal(v) if d and v is not None else v)
             for c, v, d in zip(columns, row, decimal, strict=True)} for row in rows]
