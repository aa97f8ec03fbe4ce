"""The daemon of the Python workers of every Spark the platform starts (``spark.python.daemon.module``,
:func:`~transfer_platform.runtime.spark_session.local_spark_conf`): PySpark's own
(``pyspark.daemon``), which forks each Python worker from itself, with the modules a relay's
worker imports (psycopg, :mod:`~transfer_platform.sources.relay` and the configuration's models
it names) loaded once, before it forks.

Spark ends a Python worker idle for a minute (a constant of its worker factory), so the first
relayed backfill after a quiet minute forks a new one; without this it imported those modules
again, 0.3-0.5 s on a 2-core machine, before its first row. pyarrow is not loaded here:
its import starts threads, and a process with threads is not safe to fork.

Run as ``python -m transfer_platform.runtime.spark_workers`` by Spark itself. A module that fails
to load is left to the worker that needs it, which names the failure as it always did.
"""

from __future__ import annotations

import gc
import importlib
from contextlib import suppress

#: loaded before the daemon forks: what a relay's worker imports (``relay_partition``'s module)
PRELOADED = ("psycopg", "pyspark.sql.pandas.serializers", "transfer_platform.sources.relay")


def preload() -> None:
    for name in PRELOADED:
        with suppress(Exception):  # the worker that needs it imports it again, and says why not
            importlib.import_module(name)


if __name__ == "__main__":
    preload()
    # what was loaded stays out of the collector's walks: each worker runs a full collection after
    # each task, and would otherwise walk (and touch, copying the pages it shares) all of it
    gc.freeze()
    from pyspark.daemon import manager

    manager()
