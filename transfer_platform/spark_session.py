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
#: a JVM log message holding a password as a key/value pair whose value is not already masked
#: (Spark's BasicConnectionProvider logs the JDBC properties, password included, at DEBUG);
#: MariaDB's "(using password: YES)" is no value
JVM_PASSWORD_MESSAGE = r"""(?is).*(password|passwd)["']?+\s*+[=:]\s*+["']?+(?![*]|(YES|NO)\)).*"""


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
    session = builder.getOrCreate()
    protect_jvm_logs(session)
    return session


_protected_gateway = None  # the py4j gateway (one JVM per process) whose log4j drops passwords


def protect_jvm_logs(spark: SparkSession | None = None) -> None:
    """Make the JVM's log4j drop every message holding a password as a key/value pair, at any
    level, whatever a logger's level is set to later (``setLogLevel``, ``spark.log.level``): a
    context-wide ``RegexFilter``, once per JVM. ``spark`` defaults to the active context's; with
    none, nothing is done (no JDBC connection can be made then either)."""
    global _protected_gateway
    from pyspark import SparkContext

    context = spark.sparkContext if spark is not None else SparkContext._active_spark_context
    if context is None:
        return
    gateway = context._gateway  # its log4j configuration outlives sessions
    if gateway is _protected_gateway:
        return
    log4j = context._jvm.org.apache.logging.log4j
    result = log4j.core.Filter.Result
    drop = log4j.core.filter.RegexFilter.createFilter(JVM_PASSWORD_MESSAGE, None, False, result.DENY,
                                                      result.NEUTRAL)
    drop.start()
    logger_context = log4j.LogManager.getContext(False)
    logger_context.getConfiguration().addFilter(drop)
    logger_context.updateLoggers()
    _protected_gateway = gateway
