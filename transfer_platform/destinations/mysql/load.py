"""Rows into a staging table with ``LOAD DATA LOCAL INFILE`` (measured faster than multi-row
inserts: ``benchmarks/destination_mysql.py``), from Spark's Python workers (:func:`load_partition`)
or from this process (:func:`load_batches`)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    import pymysql

NULL = "\\N"


def first_line(exc: BaseException) -> str:
    """The first line of a PyMySQL error's message (its ``str`` is the tuple of its arguments)."""
    reason = exc.args[-1] if getattr(exc, "args", None) else exc
    return (str(reason).strip().splitlines() or [type(exc).__name__])[0]


class LoadRefused(Exception):
    """The server took a row only by changing a value (a warning of LOAD DATA LOCAL)."""


def as_text(batch: pa.RecordBatch | pa.Table) -> pa.Table:
    """``batch`` as the text LOAD DATA reads back exactly: timestamps in UTC, booleans 0/1,
    backslashes doubled (``ESCAPED BY '\\\\'``), NULL as ``\\N`` (pyarrow's CSV quotes the rest)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def text(column: pa.Array) -> pa.Array:
        kind = column.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return pc.replace_substring(column, "\\", "\\\\")
        if pa.types.is_timestamp(kind):
            return pc.strftime(column.cast(pa.timestamp("us", tz="UTC")), format="%Y-%m-%d %H:%M:%S")
        return column.cast(pa.int8()).cast(pa.string()) if pa.types.is_boolean(kind) else column.cast(pa.string())

    return pa.Table.from_arrays([pc.fill_null(text(c), NULL) for c in batch.columns], names=batch.schema.names)


def load_batches(conn: pymysql.Connection, load_sql: str, batches: Iterable, folder: str | None = None) -> int:
    """Arrow record batches into the staging table on ``conn``, each a CSV file of its own in
    ``folder`` (a temporary one), loaded and removed; the rows loaded. ``load_sql`` is
    :func:`..dialect.load_data` with ``{path}`` where the file's name goes."""
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
                # PyMySQL, the connection lost while it sends the file: it closes the socket, then
                # writes the file's last packet to it (None): report the lost connection
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


def load_partition(connect: dict, load_sql: str, batches: Iterator) -> Iterator:
    """Runs in a Spark Python worker: ``batches`` loaded in one connection; a failure raises its
    first line only (never the connection settings)."""
    import pyarrow as pa
    import pymysql

    try:
        with pymysql.connect(**connect) as conn:
            rows = load_batches(conn, load_sql, batches)
    except (LoadRefused, pymysql.err.MySQLError) as exc:
        raise RuntimeError(f"LOAD DATA into the staging table failed: {first_line(exc)}") from None
    yield pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))
