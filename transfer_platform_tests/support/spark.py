"""What Spark did with a frame: which partition read each row, how many queries a JDBC scan is
split into (both kinds of session: Connect has no RDDs).
"""

from __future__ import annotations


def rows_by_partition(frame, *expressions: str) -> dict[int, list]:
    """The frame's rows (``expressions`` of them) by the Spark partition that read them; a
    partition that read nothing is absent. (Connect has no RDDs: ``spark_partition_id`` works in
    both kinds of session.)"""
    parts: dict[int, list] = {}
    for row in frame.selectExpr("spark_partition_id() AS _partition", *expressions).collect():
        parts.setdefault(row[0], []).append(row[1:] if len(row) > 2 else row[1])
    return parts


def jdbc_read_partitions(frame) -> int:
    """How many queries Spark's JDBC scan of ``frame`` is split into, from its plan
    (``JDBCRelation(...) [numPartitions=n]``): Connect has no RDD to ask."""
    import contextlib
    import io
    import re

    plan = io.StringIO()
    with contextlib.redirect_stdout(plan):
        frame.explain()
    (count,) = set(re.findall(r"numPartitions=(\d+)", plan.getvalue()))
    return int(count)
