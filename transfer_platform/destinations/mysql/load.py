"""Rows into a staging table by ``LOAD DATA LOCAL INFILE`` (faster than multi-row inserts, measured by
``benchmarks/destination_mysql.py``), from Spark's workers or this process: one CSV file per batch."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    import pymysql


def first_line(exc: BaseException) -> str:
    """The first line of a PyMySQL error's message (its ``str`` is the tuple of its arguments)."""
    reason = exc.args[-1] if getattr(exc, "args", None) else exc
    return (str(reason).strip().splitlines() or [type(exc).__name__])[0]


class LoadRefused(Exception):
    """The server took a row only by changing a value (a warning of LOAD DATA LOCAL)."""


def as_text(batch: pa.RecordBatch | pa.Table) -> pa.Table:
    """Every value as text LOAD DATA reads back exactly: UTC, 0/1, backslashes doubled, NULL ``\\N``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def text(column: pa.Array) -> pa.Array:
        kind = column.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return pc.replace_substring(column, "\\", "\\\\")
        if pa.types.is_timestamp(kind):
            return pc.strftime(column.cast(pa.timestamp("us", tz="UTC")), format="%Y-%m-%d %H:%M:%S")
        return column.cast(pa.int8()).cast(pa.string()) if pa.types.is_boolean(kind) else column.cast(pa.string())

    return pa.Table.from_arrays([pc.fill_null(text(c), "\\N") for c in batch.columns], names=batch.schema.names)


def load_batches(conn: pymysql.Connection, load_sql: str, batches: Iterable, folder: str | None = None) -> int:
    """Arrow batches loaded on ``conn`` by ``load_sql`` (``{path}``: the file's name); the rows loaded."""
    import pyarrow.csv as pa_csv
    import pymysql

    rows = 0
    with tempfile.TemporaryDirectory(prefix="tp_mysql_", dir=folder) as where, conn.cursor() as cursor:
        path = os.path.join(where, "batch.csv")
        for batch in (b for b in batches if b.num_rows):
            pa_csv.write_csv(as_text(batch), path, pa_csv.WriteOptions(include_header=False, quoting_style="needed"))
            rows += batch.num_rows
            try:
                cursor.execute(load_sql.replace("{path}", path.replace("\\", "\\\\").replace("'", "''")))
            except AttributeError:
                # PyMySQL, the connection lost while it sends the file, writes to the closed socket (None)
                if conn.open:
                    raise
                raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server during "
                                                         "LOAD DATA LOCAL") from None
            os.unlink(path)
            # LOAD DATA LOCAL turns what strict mode refuses into warnings: the first refuses the batch
            cursor.execute("SHOW WARNINGS LIMIT 1")
            warning = cursor.fetchone()
            if warning is not None:
                raise LoadRefused(f"{warning[2]} ({warning[0]} {warning[1]})")
    return rows


def load_partition(connect: dict, load_sql: str, batches: Iterator) -> Iterator:
    """In a Spark Python worker: ``batches`` loaded in one connection; a failure told by its first line."""
    import pyarrow as pa
    import pymysql

    try:
        with pymysql.connect(**connect) as conn:
            rows = load_batches(conn, load_sql, batches)
    except (LoadRefused, pymysql.err.MySQLError) as exc:
        raise RuntimeError(f"LOAD DATA into the staging table failed: {first_line(exc)}") from None
    yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))
