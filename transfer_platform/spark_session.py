"""The one place that knows how a SparkSession for transfers is configured.

The session itself is created by a Dagster resource (``orchestration/resources.py``) or, in tests
and benchmarks, by :func:`get_spark_session`; never at import time.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from transfer_platform.config.models import SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: JDBC drivers from Debian's libpostgresql-jdbc-java and libmariadb-java
DEFAULT_JDBC_JARS = (
    "/usr/share/java/postgresql.jar",
    "/usr/share/java/mariadb-java-client.jar",
)
JARS_ENV_VAR = "TRANSFER_PLATFORM_JDBC_JARS"


def jdbc_jars() -> list[str]:
    configured = os.environ.get(JARS_ENV_VAR)
    candidates = configured.split(",") if configured else list(DEFAULT_JDBC_JARS)
    return [jar for jar in candidates if Path(jar).is_file()]


def spark_conf(settings: SparkSettings | None = None) -> dict[str, str]:
    # read when the session starts, whoever starts it (get_spark_session, the Dagster resource):
    # Python workers (the PostgreSQL destination's COPY) run this interpreter, with its packages
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = settings or SparkSettings()
    utc_opts = "-Duser.timezone=UTC -Dfile.encoding=UTF-8"
    conf = {
        "spark.master": settings.master,
        "spark.app.name": "transfer_platform",
        "spark.driver.memory": settings.driver_memory,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": "WARN",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": utc_opts,
        "spark.executor.extraJavaOptions": utc_opts,
        # Spark still writes INT96 timestamps by default: microseconds and zones get mangled in Delta
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
        "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
        "spark.sql.warehouse.dir": str(Path(os.environ.get("TMPDIR", "/tmp")) / "transfer_platform_warehouse"),
        # PySpark 4 records the Python call site of every Column/DataFrame call for error
        # context: ~5 JVM round trips and a stack walk per call, ~0.1 s per window. Our errors
        # are reported by their reason, never by a call site.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
    }
    jars = jdbc_jars()
    if jars:
        conf["spark.jars"] = ",".join(jars)
    conf.update(settings.conf)
    return conf


def get_spark_session(settings: SparkSettings | None = None) -> SparkSession:
    """Create (or return the process's existing) SparkSession with the platform's settings."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    for key, value in spark_conf(settings).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
