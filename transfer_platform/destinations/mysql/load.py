"""Rows into a staging table with ``LOAD DATA LOCAL INFILE``: from Spark's Python workers
(:func:`load_partition`) or from this process (:func:`load_batches`).

Each Arrow batch becomes a CSV file that MySQL reads exactly: every value is written as text
(timestamps as ``YYYY-MM-DD HH:MM:SS.ffffff`` in UTC, booleans as 0/1), backslashes doubled
(``ESCAPED BY '\\\\'``), NULL as ``\\N``, every field quoted with inner quotes doubled (pyarrow's
CSV writer). Measured against multi-row inserts (PyMySQL's ``executemany``) on this machine,
LOAD DATA was the faster (docs/destinations.md); :func:`insert_batches` is kept for
that comparison (``benchmarks/destination_mysql.py --staging inserts``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    import pymysql

NULL = "\\N"


class LoadRefused(Exception):
    """The server took a row only by changing a value (a warning of LOAD DATA LOCAL)."""


def as_text(batch: pa.RecordBatch | pa.Table) -> pa.Table:
    """``batch`` with every column as text LOAD DATA reads back exactly (see the module)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = []
    for column in batch.columns:
        kind = column.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            text = pc.replace_substring(column, "\\", "\\\\")
        elif pa.types.is_timestamp(kind):
            text = pc.strftime(column.cast(pa.timestamp("us", tz="UTC")), format="%Y-%m-%d %H:%M:%S")
        elif pa.types.is_boolean(kind):
            text = column.cast(pa.int8()).cast(pa.string())
        else:
            text = column.cast(pa.string())
        columns.append(pc.fill_null(text, NULL))
    return pa.Table.from_arrays(columns, names=batch.schema.names)


def _write_csv(batch: pa.RecordBatch | pa.Table, path: str) -> int:
    import pyarrow.csv as pa_csv

    pa_csv.write_csv(as_text(batch), path, pa_csv.WriteOptions(include_header=False, quoting_style="needed"))
    return batch.num_rows


def load_batches(conn: pymysql.Connection, load_sql: str, batches: Iterable, folder: str | None = None) -> int:
    """Arrow record batches into the staging table on ``conn`` (``local_infile`` on), each batch
    a CSV file of its own in ``folder`` (a temporary one), loaded and removed; the rows loaded.
    ``load_sql`` is :func:`..sql.load_data` with ``{path}`` where the file's name goes."""
    rows = 0
    with tempfile.TemporaryDirectory(prefix="tp_mysql_", dir=folder) as where:
        path = os.path.join(where, "batch.csv")
        with conn.cursor() as cursor:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                rows += _write_csv(batch, path)
                try:
                    cursor.execute(load_sql.replace("{path}", path.replace("\\", "\\\\").replace("'", "''")))
                except AttributeError:
                    import pymysql

                    # PyMySQL, the connection lost while it sends the file: it closes the socket,
                    # then writes the file's last packet to it (None): report the lost connection
                    if conn.open:
                        raise
                    raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server during "
                                                             "LOAD DATA LOCAL") from None
                os.unlink(path)
                # LOAD DATA LOCAL turns what strict mode refuses into warnings (a value truncated,
                # bent): the first one refuses the batch
                cursor.execute("SHOW WARNINGS LIMIT 1")
                warning = cursor.fetchone()
                if warning is not None:
                    raise LoadRefused(f"{warning[2]} ({warning[0]} {warning[1]})")
    return rows


def insert_batches(conn: pymysql.Connection, insert_sql: str, batches: Iterable) -> int:
    """The same rows as multi-row ``INSERT``s (PyMySQL folds ``executemany`` into statements of
    up to 1 MB); only for the comparison with :func:`load_batches`."""
    from datetime import datetime

    rows = 0
    with conn.cursor() as cursor:
        for batch in batches:
            values = [tuple(v.replace(tzinfo=None) if isinstance(v, datetime) else v for v in row.values())
                      for row in batch.to_pylist()]
            if values:
                cursor.executemany(insert_sql, values)
            rows += len(values)
    return rows


def load_partition(connect: dict, load_sql: str, batches: Iterator) -> Iterator:
    """Runs in a Spark Python worker: ``batches`` into the staging table in one connection; a
    failure raises its first line only (never the connection settings)."""
    import pyarrow as pa
    import pymysql

    try:
        conn = pymysql.connect(**connect)
        try:
            rows = load_batches(conn, load_sql, batches)
        finally:
            conn.close()
    except LoadRefused as exc:
        raise RuntimeError(f"LOAD DATA into the staging table failed: {exc}") from None
    except pymysql.err.MySQLError as exc:
        reason = exc.args[-1] if exc.args else str(exc)
        raise RuntimeError(f"LOAD DATA into the staging table failed: {str(reason).strip().splitlines()[0]}") from None
    yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))
