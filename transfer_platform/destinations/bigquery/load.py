"""A window's rows as the CSV text a BigQuery load job reads exactly (imported by Spark's workers):
a string or JSON value as a JSON string literal (a raw newline needs ``allowQuotedNewlines``, which
the emulator the tests use refuses), a timestamp ISO 8601 in UTC to the microsecond, a boolean
``true``/``false``, a number its exact text; NULL an empty field (a string is never empty: ``""``)."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame


def _text(column: pa.ChunkedArray | pa.Array, data_type: str) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc

    if data_type in ("string", "json", "float"):
        text = (lambda v: repr(float(v))) if data_type == "float" else partial(json.dumps, ensure_ascii=False)
        return pa.array([None if v is None else text(v) for v in column.to_pylist()], pa.string())
    if data_type == "timestamp":
        text = pc.strftime(column.cast(pa.timestamp("us", tz="UTC")), format="%Y-%m-%dT%H:%M:%S")
        return pc.binary_join_element_wise(text, pa.scalar("Z"), "")
    if data_type == "boolean":
        return pc.if_else(column, "true", "false")
    return column.cast(pa.string())


def write_csv(batches: Iterable[pa.Table | pa.RecordBatch], columns: list[tuple[str, str]], path: str) -> None:
    """``batches`` as the CSV file ``path`` (no header) of ``columns``' text (empty: no row)."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    schema = pa.schema([(name, pa.string()) for name, _ in columns])
    options = pa_csv.WriteOptions(include_header=False, quoting_style="needed")
    with pa_csv.CSVWriter(path, schema, write_options=options) as writer:
        for batch in (b for b in batches if b.num_rows):
            writer.write_table(pa.Table.from_arrays([_text(batch.column(n), t) for n, t in columns], schema=schema))


def write_part(batches: Iterator[pa.RecordBatch], *, folder: str, columns: list[tuple[str, str]]
               ) -> Iterator[pa.RecordBatch]:
    """A Spark worker's partition as one CSV part in ``folder`` (Spark runs on this machine)."""
    import pyarrow as pa

    path = os.path.join(folder, f"part-{uuid.uuid4().hex}.csv")
    write_csv(batches, columns, path)
    yield pa.RecordBatch.from_pydict({"path": [path]})


def stage_frame(frame: DataFrame, columns: list[tuple[str, str]], folder: str, path: str) -> None:
    """Spark's executors write ``frame`` as CSV parts in ``folder`` (nothing of the window through
    this process), joined here into the one file ``path``."""
    parts = frame.mapInArrow(partial(write_part, folder=folder, columns=columns), "path string").collect()
    with open(path, "wb") as out:
        for part in parts:
            with open(part["path"], "rb") as file:
                shutil.copyfileobj(file, out)
            os.unlink(part["path"])
