"""The one place that knows how a SparkSession for transfers is configured.

Two kinds: a local Spark inside the process that transfers (the embedded default), or a client of
a long-lived Spark Connect server that every run shares (``spark.remote: sc://host:port``, or
``$TRANSFER_PLATFORM_SPARK_REMOTE``), started by ``transfer-platform spark-server``
(:func:`serve`) with the same settings a local Spark gets: JDBC drivers, UTC, the log filter.

The session itself is created by a Dagster resource (``orchestration/resources.py``) or, in the
command line, tests and benchmarks, by :func:`get_spark_session`; never at import time.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from transfer_platform.errors import ConfigError, ConnectionFailure, TransferPlatformError

if TYPE_CHECKING:
    from transfer_platform.config.models import SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG = logging.getLogger("transfer_platform.spark")
REMOTE_ENV_VAR = "TRANSFER_PLATFORM_SPARK_REMOTE"
DEFAULT_CONNECT_PORT = 15002
#: how long a client keeps retrying a Connect server that stopped answering (Spark's default
#: policy waits ~10 minutes): about 15 s, then the transfer fails and says so
_RETRIES = {"max_retries": 5, "initial_backoff": 200, "max_backoff": 5000, "backoff_multiplier": 4.0}
#: JDBC drivers from Debian's libpostgresql-jdbc-java and libmariadb-java
DEFAULT_JDBC_JARS = (
    "/usr/share/java/postgresql.jar",
    "/usr/share/java/mariadb-java-client.jar",
)
JARS_ENV_VAR = "TRANSFER_PLATFORM_JDBC_JARS"
#: a JVM log message holding a password as a key/value pair whose value is not already masked
#: (Spark's BasicConnectionProvider logs the JDBC properties, password included, at DEBUG; a
#: Spark Connect server logs each plan it receives, a read's options as ``key: "password"
#: value: "..."``); MariaDB's "(using password: YES)" is no value
#: also any message naming ``AWS_SECRET_ACCESS_KEY``: the function Spark ships to the executors
#: that stage a large window in a bucket carries the bucket's keys (delta-rs's option names), and a
#: Spark Connect server at DEBUG logs each plan, that function's pickled bytes in it
JVM_PASSWORD_MESSAGE = (r"""(?is).*(?:(password|passwd)["']?+\s*+(?:[=:]|value\s*+:)\s*+["']?+(?![*]|(YES|NO)\))"""
                        r"""|AWS_SECRET_ACCESS_KEY).*""")


def jdbc_jars() -> list[str]:
    configured = os.environ.get(JARS_ENV_VAR)
    candidates = configured.split(",") if configured else list(DEFAULT_JDBC_JARS)
    return [jar for jar in candidates if Path(jar).is_file()]


@dataclass(frozen=True)
class Endpoint:
    """A Spark Connect server's address."""

    host: str
    port: int

    @property
    def url(self) -> str:
        return f"sc://{self.host}:{self.port}"


def parse_endpoint(url: str) -> Endpoint:
    """``sc://host:port`` (the port defaults to 15002); a ``ValueError`` saying what to write."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme != "sc" or not parts.hostname or port == -1 or parts.path not in ("", "/") \
            or parts.query or parts.username or parts.password:
        raise ValueError(f"a Spark Connect endpoint is written sc://host:port (for example "
                         f"sc://127.0.0.1:{DEFAULT_CONNECT_PORT}), not {url!r}")
    return Endpoint(parts.hostname, port or DEFAULT_CONNECT_PORT)


def remote_endpoint(settings: SparkSettings | None = None) -> Endpoint | None:
    """The Connect server transfers use (``$TRANSFER_PLATFORM_SPARK_REMOTE`` first, then the
    configuration's ``spark.remote``), or None for a local Spark in the process."""
    url = os.environ.get(REMOTE_ENV_VAR) or (settings.remote if settings is not None else None)
    if not url:
        return None
    try:
        return parse_endpoint(url)
    except ValueError as exc:
        source = f"${REMOTE_ENV_VAR}" if os.environ.get(REMOTE_ENV_VAR) else "spark.remote"
        raise ConfigError(f"{source}: {exc}") from None


def spark_conf(settings: SparkSettings | None = None) -> dict[str, str]:
    """The builder settings of the Spark that transfers use: ``{"spark.remote": url}`` for a
    Connect server (the server holds every other setting), else a local Spark's settings."""
    endpoint = remote_endpoint(settings)
    if endpoint is not None:
        return {"spark.remote": endpoint.url}
    return local_spark_conf(settings)


def local_spark_conf(settings: SparkSettings | None = None) -> dict[str, str]:
    """The settings of a Spark JVM (a local session's, or a Connect server's)."""
    from transfer_platform.config.models import SparkSettings

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
        # a JDBC driver must also be on the driver's own class path: Spark Connect runs a
        # client's read in a thread whose class loader does not see spark.jars ("No suitable driver")
        conf["spark.driver.extraClassPath"] = ":".join(jars)
    conf.update(settings.conf)
    return conf


def get_spark_session(settings: SparkSettings | None = None) -> SparkSession:
    """Create (or return the process's existing) SparkSession with the platform's settings."""
    return session_from_conf(spark_conf(settings))


def session_from_conf(conf: dict[str, Any]) -> SparkSession:
    """A session from :func:`spark_conf`'s settings: a Connect client checked to reach a server of
    the client's Spark version, or a local Spark whose JVM log drops passwords."""
    from pyspark.sql import SparkSession

    if "spark.remote" in conf:
        return connect(parse_endpoint(conf["spark.remote"]))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    protect_jvm_logs(session)
    return session


def _how_to_start(endpoint: Endpoint) -> str:
    return (f"start it with `transfer-platform --config <file> spark-server` on {endpoint.host} (it listens on "
            f"port {endpoint.port} when the file's spark.remote says {endpoint.url}), or drop spark.remote "
            f"and unset ${REMOTE_ENV_VAR} to run Spark inside each transfer")


def connect(endpoint: Endpoint) -> SparkSession:
    """A client session of the Connect server at ``endpoint``: fails at once (never retries for
    minutes) when nothing answers there, and when the server's Spark version is not the client's."""
    import pyspark
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=5):
            pass
    except OSError as exc:
        raise ConnectionFailure(f"the Spark Connect server {endpoint.url}", host=endpoint.host,
                                port=endpoint.port, reason=exc.strerror or str(exc),
                                fix=_how_to_start(endpoint)) from None
    # a session of its own on the server, whatever this process opened before (a run's, a test's)
    session = SparkSession.builder.remote(endpoint.url).create()
    client = session.client
    client.set_retry_policies([DefaultPolicy(**_RETRIES)])
    try:
        server_version = session.version
    except (PySparkException, OSError) as exc:
        raise ConnectionFailure(f"the Spark Connect server {endpoint.url}", host=endpoint.host,
                                port=endpoint.port, reason=f"it does not answer as a Spark Connect "
                                f"server: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                                fix=_how_to_start(endpoint)) from None
    check_versions(pyspark.__version__, server_version, endpoint)
    atexit.register(_release, session, endpoint)  # a command line's session ends with its process
    return session


def _release(session: SparkSession, endpoint: Endpoint) -> None:
    """Release the session on the server, if the server is still there (it drops idle sessions
    itself): at exit, a server gone would cost the client's retries and PySpark's error log,
    written to whatever stream is still open."""
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=1):
            pass
    except OSError:
        return
    client_log = logging.getLogger("pyspark.sql.connect.logging")
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)
    try:
        session.stop()
    except Exception:  # noqa: BLE001
        _LOG.debug("releasing the Spark Connect session failed", exc_info=True)
    finally:
        client_log.setLevel(level)


def check_versions(client: str, server: str, endpoint: Endpoint) -> None:
    """Refuse a server whose Spark major.minor version differs from the client's PySpark."""
    if client.split(".")[:2] != server.split(".")[:2]:
        raise SparkVersionMismatch(
            f"the Spark Connect server {endpoint.url} runs Spark {server}, and this client is PySpark "
            f"{client}: they must have the same major.minor version. Fix: start the server from this "
            f"installation (`transfer-platform spark-server`), or install pyspark=={server} here")


class SparkVersionMismatch(TransferPlatformError):
    """The Spark Connect server and the client are different Spark versions."""


def stop_session(session: SparkSession | None) -> None:
    """Release a Connect client's session on the server (a local session is left to its process)."""
    if session is not None and is_remote(session):
        session.stop()


def is_remote(session: SparkSession) -> bool:
    return not hasattr(session, "_jsparkSession")


def serve(settings: SparkSettings | None, endpoint: Endpoint, *, ready: Callable[[str], None]) -> None:
    """Run a Spark Connect server at ``endpoint`` until SIGTERM or SIGINT: a local Spark (the
    configured ``master``, memory and ``conf``, the JDBC drivers on the driver's class path, UTC,
    the log filter that drops passwords) with Spark's Connect plugin listening there."""
    conf = local_spark_conf(settings)
    conf.update({
        "spark.app.name": "transfer_platform Spark Connect server",
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": endpoint.host,
        "spark.connect.grpc.binding.port": str(endpoint.port),
    })
    for variable in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):  # they would make it a client
        os.environ.pop(variable, None)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    session = session_from_conf(conf)
    ready(f"Spark Connect server listening on {endpoint.url} (Spark {session.version}, master "
          f"{conf['spark.master']}); stop it with Ctrl-C or SIGTERM")
    stop.wait()
    session.stop()


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
