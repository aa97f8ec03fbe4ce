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
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

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


def write_csv(batches: Iterable[pa.Table | pa.RecordBatch], columns: list[tuple[str, str]], path: str) -> int:
    """``batches`` written to the CSV file ``path`` (no header) as the staged text of ``columns``
    ((name, data_type)); its size in bytes (0: no row, no file)."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    schema = pa.schema([(name, pa.string()) for name, _ in columns])
    writer = None
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if writer is None:
                writer = pa_csv.CSVWriter(path, schema, write_options=pa_csv.WriteOptions(include_header=False,
                                                                                          quoting_style="needed"))
            writer.write_table(pa.Table.from_arrays([_text(batch.column(name), data_type)
                                                     for name, data_type in columns], schema=schema))
    finally:
        if writer is not None:
            writer.close()
    return os.path.getsize(path) if writer is not None else 0


def write_part(batches: Iterator[pa.RecordBatch], *, folder: str, columns: list[tuple[str, str]]
               ) -> Iterator[pa.RecordBatch]:
    """Runs in a Spark Python worker: its partition written as one CSV part in ``folder`` (a
    folder of this machine's: Spark runs here); hands back the part's path and size only."""
    import uuid

    import pyarrow as pa

    path = os.path.join(folder, f"part-{uuid.uuid4().hex}.csv")
    size = write_csv(batches, columns, path)
    yield pa.RecordBatch.from_pydict({"path": [path if size else None], "size": [size]},
                                     schema=pa.schema([("path", pa.string()), ("size", pa.int64())]))


def stage_frame(frame: DataFrame, columns: list[tuple[str, str]], folder: str, path: str) -> int:
    """Spark's executors write ``frame`` as CSV parts in ``folder`` (one per partition, nothing of
    the window through this process), joined here into the one file ``path``; its size."""
    import shutil
    from functools import partial

    parts = frame.mapInArrow(partial(write_part, folder=folder, columns=columns), "path string, size long").collect()
    size = 0
    with open(path, "wb") as out:
        for part in parts:
            if part["path"]:
                with open(part["path"], "rb") as file:
                    shutil.copyfileobj(file, out)
                os.unlink(part["path"])
                size += part["size"]
    return size


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
