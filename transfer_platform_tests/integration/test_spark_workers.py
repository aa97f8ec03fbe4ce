"""The Python workers of the platform's Spark (a local session's, a Connect server's) are forked
from a daemon that loaded a relay's modules once: a worker forked after Spark ended an idle one
does not import them again before its first row."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_the_python_workers_daemon_holds_the_relays_modules_before_it_forks(spark) -> None:
    from pyspark.sql.functions import udf

    def daemons_libraries() -> str:  # pickled whole: the worker imports nothing of this module
        """In a Python worker: the shared libraries its parent, the workers' daemon, has mapped."""
        import os

        with open(f"/proc/{os.getppid()}/maps") as maps:
            return maps.read()

    mapped = udf(daemons_libraries, "string")
    maps = spark.range(1).select(mapped()).first()[0]
    # psycopg's libpq binding and pydantic's core (the configuration's models the relay names): C
    # extensions, mapped in the daemon only if it imported them (no task runs in the daemon)
    assert "psycopg_binary" in maps
    assert "pydantic_core" in maps
