"""Rows into a staging table with ``COPY ... FROM STDIN (FORMAT csv)``, from Spark's Python workers
(:func:`copy_partition`) or from this process (:func:`copy_batches`); a module of its own, light to
import in a worker."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg


def copy_partition(connect: dict, copy_sql: str, batches: Iterator) -> Iterator:
    """In a Spark Python worker: ``batches`` (Arrow) into ``copy_sql``; one batch: the rows written."""
    import psycopg
    import pyarrow as pa

    try:
        with psycopg.connect(**connect) as conn:
            rows = copy_batches(conn, copy_sql, batches)
    except psycopg.Error as exc:
        # the first line only: a clear reason, never the connection settings
        raise RuntimeError(f"COPY into the staging table failed: {str(exc).strip().splitlines()[0]}") from None
    yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))


def copy_batches(conn: psycopg.Connection, copy_sql: str, batches: Iterable) -> int:
    """Arrow record batches into ``copy_sql`` on ``conn``, one batch of CSV at a time; the rows
    written. pyarrow's CSV quotes every string and leaves NULLs bare (PostgreSQL's CSV reads a bare
    empty field as NULL, ``""`` as an empty string) and writes timestamps with microseconds and ``Z``."""
    import io

    import pyarrow.csv as pa_csv

    options, rows = pa_csv.WriteOptions(include_header=False), 0
    with conn.cursor().copy(copy_sql) as copy:
        for batch in batches:
            buffer = io.BytesIO()
            pa_csv.write_csv(batch, buffer, options)
            copy.write(buffer.getvalue())
            rows += batch.num_rows
    return rows
