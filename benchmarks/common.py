"""What every benchmark case shares: the database, the source table's shape, row counts, timing
with row-count checks, and the peak memory of the process tree (the Spark JVM included)."""

from __future__ import annotations

import gc
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import psycopg

PG = {"host": "127.0.0.1", "port": 5432, "dbname": "test", "user": "postgres"}
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
#: the source's schema; every other schema of the run starts with it and ``_``. One per run
#: (``tp_bench_<6 hex>``), so that two runs at once (CI's smoke test while someone benchmarks)
#: never drop each other's tables
SCHEMA = f"tp_bench_{uuid.uuid4().hex[:6]}"
#: the source's clock: ``updated_at`` spreads over the year before this moment
NOW = datetime(2026, 1, 1, tzinfo=UTC)

COLUMNS = ["id", "tenant_id", "updated_at", "a", "b", "c", "x", "y", "s1", "s2", "doc"]
TYPES = {"id": "integer", "tenant_id": "string", "updated_at": "timestamp", "a": "integer",
         "b": "integer", "c": "integer", "x": "float", "y": "float", "s1": "string",
         "s2": "string", "doc": "string"}


class RowCountMismatch(RuntimeError):
    """A case delivered a different number of rows than the source holds: its time is void."""


def storage_env(database: str) -> dict[str, str]:
    """The environment ``deploy/dagster.production.yaml``'s storage reads: PostgreSQL's
    ``database`` on the benchmarks' server."""
    return {"DAGSTER_PG_HOST": PG["host"], "DAGSTER_PG_PORT": str(PG["port"]), "DAGSTER_PG_DB": database,
            "DAGSTER_PG_USERNAME": PG["user"], "DAGSTER_PG_PASSWORD": ""}


def pg_connect(**extra) -> psycopg.Connection:
    return psycopg.connect(**PG, **extra)


def count_rows(table: str, where: str = "", params: tuple = ()) -> int:
    """``count(*)`` of a table (0 if it does not exist: a case that created nothing)."""
    with pg_connect(autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0]
        if exists is None:
            return 0
        return conn.execute(f"SELECT count(*) FROM {table} {where}", params).fetchone()[0]


def drop_schemas(prefix: str) -> None:
    """Drop every schema whose name starts with ``prefix`` (with everything in it)."""
    with pg_connect(autocommit=True) as conn:
        names = conn.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)",
                             (prefix,)).fetchall()
        for (name,) in names:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


def server_version() -> str:
    with pg_connect(autocommit=True) as conn:
        return conn.execute("SHOW server_version").fetchone()[0]


# -- memory ----------------------------------------------------------------------------------


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants (the Spark JVM is a child)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def release_memory() -> None:
    """Collect garbage in Python and in the Spark JVM (a full GC lets G1 give heap back to the
    system), so that a case's peak is not the previous case's heap."""
    gc.collect()
    if "pyspark" in sys.modules:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is not None:
            spark.sparkContext._jvm.System.gc()  # no public API for it


class PeakMemory:
    """The highest resident memory of this process tree while the block runs (sampled every
    0.2 s, and once on entry and exit so that a short block still has a value). On entry the
    garbage is collected and the resident memory recorded as ``start``."""

    def __init__(self) -> None:
        self.start = self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _sample(self) -> None:
        self.peak = max(self.peak, tree_rss_bytes(os.getpid()))

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def __enter__(self) -> PeakMemory:
        release_memory()
        self.start = tree_rss_bytes(os.getpid())
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def peak_gb(self) -> float:
        return round(self.peak / 1024**3, 2)

    @property
    def report(self) -> dict:
        return {"memory_at_start_gb": round(self.start / 1024**3, 2), "peak_memory_gb": self.peak_gb}


# -- timing ----------------------------------------------------------------------------------


def stats(seconds: list[float]) -> dict:
    return {"median_s": round(statistics.median(seconds), 3), "min_s": round(min(seconds), 3),
            "max_s": round(max(seconds), 3), "runs": len(seconds)}


def measure(name: str, run: Callable[[], object], *, runs: int, expected: int,
            delivered: Callable[[], int], cleanup: Callable[[], object] = lambda: None) -> dict:
    """Time ``run`` ``runs`` times; after each run (untimed) check that ``delivered()`` equals
    ``expected`` (raise :class:`RowCountMismatch` if not), then ``cleanup()``. The peak memory
    covers this case alone."""
    seconds = []
    with PeakMemory() as memory:
        cleanup()
        for _ in range(runs):
            start = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - start)
            got = delivered()
            if got != expected:
                raise RowCountMismatch(f"{name}: delivered {got} rows, the source has {expected}")
            cleanup()
    return {**stats(seconds), "rows": expected, "rows_checked": True, **memory.report}
