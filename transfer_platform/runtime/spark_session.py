"""The one place that knows how a SparkSession for transfers is configured.

Two kinds: a local Spark inside the process that transfers, or a client of a Spark Connect
server: one that every run shares (``spark.remote: sc://host:port``, or
``$TRANSFER_PLATFORM_SPARK_REMOTE``), started by ``transfer-platform spark-server``
(:func:`serve`) with the same settings a local Spark gets (JDBC drivers, UTC, the log filter), or,
by default, the shared server of this machine that the first process needing Spark starts in the
background (:mod:`transfer_platform.runtime.shared_spark`; a local Spark when opted out or unusable).

The session itself is created by a Dagster resource (``orchestration/catalog/resources.py``) or, in the
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
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transfer_platform import vendors
from transfer_platform.config.endpoints import Endpoint, parse_endpoint
from transfer_platform.errors import ConfigError, ConnectionFailure, TransferPlatformError
from transfer_platform.runtime.shared_spark import SHARED_MARKER

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from transfer_platform.config.models import SparkSettings

_LOG = logging.getLogger("transfer_platform.spark")
REMOTE_ENV_VAR = "TRANSFER_PLATFORM_SPARK_REMOTE"
#: how long a client keeps retrying a Connect server that does not answer (Spark's default policy
#: waits ~10 minutes): waits of 0.1, 0.3, 0.9, 2.7 and 3 s (plus up to 0.5 s of jitter on the last
#: two), ~7.5 s in all, then the call fails (and the transfer with it, see :func:`server_lost`).
#: A server whose port refuses connections is not retried at all (:func:`connect_retry_policy`).
_RETRIES = {"max_retries": 5, "initial_backoff": 100, "max_backoff": 3000, "backoff_multiplier": 3.0}
#: how long a probe of a Connect server's port waits for an answer
PROBE_TIMEOUT_S = 2.0
#: the JDBC drivers of the sources read over JDBC (their records: Debian's libpostgresql-jdbc-java
#: and libmariadb-java)
DEFAULT_JDBC_JARS = vendors.jdbc_jars()
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
    Connect server (the server holds every other setting), else a local Spark's settings, with
    (``spark.shared``, the default) the marker that asks :func:`session_from_conf` for the shared
    server of these settings. Nothing starts here: definitions call it when they load."""
    from transfer_platform.config.models import SparkSettings

    endpoint = remote_endpoint(settings)
    if endpoint is not None:
        return {"spark.remote": endpoint.url}
    conf = local_spark_conf(settings)
    settings = settings or SparkSettings()
    if settings.shared:
        conf[SHARED_MARKER] = str(settings.shared_idle_seconds)
    return conf


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
        # the Python workers forked with a relay's modules already loaded (runtime/spark_workers.py)
        "spark.python.daemon.module": "transfer_platform.runtime.spark_workers",
    }
    jars = jdbc_jars()
    if jars:
        conf["spark.jars"] = ",".join(jars)
        # a JDBC driver must also be on the driver's own class path: Spark Connect runs a
        # client's read in a thread whose class loader does not see spark.jars ("No suitable driver")
        conf["spark.driver.extraClassPath"] = ":".join(jars)
    conf.update(settings.conf)
    return conf


def get_spark_session(settings: SparkSettings | None = None, *, shared: bool | None = None,
                      warn: Callable[[str], None] | None = None) -> SparkSession:
    """Create (or return the process's existing) SparkSession with the platform's settings.
    ``shared=False`` (``--no-shared-spark``) runs Spark in this process instead of the shared
    server of the default mode; ``warn`` receives the one warning of a shared server that could
    not be used (default: this module's logger)."""
    conf = spark_conf(settings)
    if shared is False:
        conf.pop(SHARED_MARKER, None)
    return session_from_conf(conf, warn=warn)


def session_from_conf(conf: dict[str, Any], *, warn: Callable[[str], None] | None = None) -> SparkSession:
    """A session from :func:`spark_conf`'s settings: a Connect client checked to reach a server of
    the client's Spark version (``spark.remote``, or the shared server of the default mode, unless
    ``$TRANSFER_PLATFORM_SHARED_SPARK`` says off), or a local Spark whose JVM log drops passwords."""
    from pyspark.sql import SparkSession

    from transfer_platform.runtime.shared_spark import shared_from_env, shared_session

    if "spark.remote" in conf:
        return connect(parse_endpoint(conf["spark.remote"]))
    conf = dict(conf)
    idle_seconds = conf.pop(SHARED_MARKER, None)
    if idle_seconds is not None and shared_from_env() is not False:
        session = shared_session(conf, int(idle_seconds), warn or _LOG.warning)
        if session is not None:
            return session
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


def _probe(endpoint: Endpoint, timeout: float) -> OSError | None:
    """The error of a TCP connection to ``endpoint``, or None if something accepted it."""
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout):
            return None
    except OSError as exc:
        return exc


def _refused(endpoint: Endpoint, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why nothing accepts a connection at ``endpoint`` (``"Connection refused"``), or None."""
    exc = _probe(endpoint, timeout)
    return None if exc is None else exc.strerror or str(exc) or type(exc).__name__


def connect_retry_policy(endpoint: Endpoint) -> Any:
    """The retry policy of a client of ``endpoint``: Spark's default policy (what it retries: gRPC
    ``UNAVAILABLE`` and errors the server marks retryable) with the ``_RETRIES`` budget, except
    that a call is not retried once the server's port refuses connections: its process is gone,
    and a server started again holds none of the session's state, so waiting cannot save the
    call (or the transfer). PySpark's retries are meant to be extended by subclassing
    (``pyspark/sql/connect/client/retries.py``; ``SparkConnectClient.set_retry_policies``)."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    class ServerPolicy(DefaultPolicy):
        def can_retry(self, e: BaseException) -> bool:  # a timeout or an unreachable network may be a blip
            return super().can_retry(e) and not isinstance(_probe(endpoint, PROBE_TIMEOUT_S), ConnectionRefusedError)

    return ServerPolicy(**_RETRIES)


#: the endpoint of each Connect client session :func:`connect` made (PySpark keeps the port private)
_ENDPOINTS: weakref.WeakKeyDictionary[Any, Endpoint] = weakref.WeakKeyDictionary()


def connect(endpoint: Endpoint, *, user_id: str | None = None) -> SparkSession:
    """A client session of the Connect server at ``endpoint``: fails at once (never retries for
    minutes) when nothing answers there, and when the server's Spark version is not the client's.
    ``user_id``: the session's Spark Connect user id (the shared server reads its client's pid there)."""
    import pyspark
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    refused = _refused(endpoint, timeout=5)
    if refused is not None:
        raise ConnectionFailure(f"the Spark Connect server {endpoint.url}", host=endpoint.host,
                                port=endpoint.port, reason=refused, fix=_how_to_start(endpoint))
    # PySpark warns once per call that gave up retrying; the call's error says it, and a transfer
    # reports it as SparkServerLost: the warning would only add a line with a source path to stderr
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]", category=UserWarning)
    # a session of its own on the server, whatever this process opened before (a run's, a test's)
    url = endpoint.url if user_id is None else f"{endpoint.url}/;user_id={user_id}"
    session = SparkSession.builder.remote(url).create()
    _ENDPOINTS[session] = endpoint
    client = session.client
    client.set_retry_policies([connect_retry_policy(endpoint)])
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
    if _refused(endpoint, timeout=1) is not None:
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


class SparkServerLost(ConnectionFailure):
    """The Spark Connect server a transfer uses stopped answering while the transfer ran (it was
    killed, ran out of memory, its machine went away). The transfer stops: every model, at once."""

    blame = "platform"

    def __init__(self, endpoint: Endpoint, reason: str) -> None:
        super().__init__(
            f"the Spark Connect server {endpoint.url}",
            reason=f"it stopped answering during the transfer ({reason}), which stopped there: the "
                   f"windows committed before stay committed, no other window was committed",
            fix=f"see the server's log for why it stopped (out of memory: raise spark.driver_memory), "
                f"start it again with `transfer-platform --config <file> spark-server` on {endpoint.host} "
                f"(it listens on port {endpoint.port} when the file's spark.remote says {endpoint.url}), "
                f"then run the transfer again: it resumes after the last committed window")
        self.endpoint = endpoint
        self.host, self.port = endpoint.host, endpoint.port  # named once in the message: the URL


def _grpc_unavailable(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an error it was raised from, says the server did not answer
    (gRPC ``UNAVAILABLE``: refused, reset, unreachable), after the client's retries."""
    import grpc
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, SparkConnectGrpcException) and exc.getGrpcStatusCode() == grpc.StatusCode.UNAVAILABLE:
            return True
        if isinstance(exc, grpc.RpcError) and callable(getattr(exc, "code", None)) \
                and exc.code() == grpc.StatusCode.UNAVAILABLE:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class LazySession:
    """A SparkSession started on its first use (any attribute), by ``start()``: a transfer whose
    reads need no Spark (small windows read directly, ``sources/direct.py``) never starts one,
    nor asks a Spark Connect server for a session and releases it."""

    def __init__(self, start: Callable[[], SparkSession]) -> None:
        self._start = start
        self._session: SparkSession | None = None

    @property
    def session(self) -> SparkSession:
        if self._session is None:
            self._session = self._start()
        return self._session

    @property
    def started(self) -> SparkSession | None:
        """The session if it was started, else None (nothing is started here)."""
        return self._session

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)


def _started(spark: Any) -> SparkSession | None:
    return spark.started if isinstance(spark, LazySession) else spark


def server_lost(spark: SparkSession | None, exc: BaseException | None = None) -> SparkServerLost | None:
    """For a Spark Connect client session whose call failed with ``exc``: the error to report if
    the server is gone (the call's gRPC status says it did not answer, or its port now refuses a
    connection), else None (a local session, or a server that is there: ``exc`` is the call's
    own failure). Costs one connection attempt to the server's port, on a failure only."""
    spark = _started(spark)
    endpoint = _ENDPOINTS.get(spark) if spark is not None and is_remote(spark) else None
    if endpoint is None:
        return None
    refused = _refused(endpoint)
    if refused is not None:
        return SparkServerLost(endpoint, refused)
    if _grpc_unavailable(exc):
        return SparkServerLost(endpoint, "gRPC UNAVAILABLE")
    return None


def stop_session(session: SparkSession | None) -> None:
    """Release a Connect client's session on the server (a local session is left to its process);
    a server that is gone is not asked (that would cost the client's retries)."""
    session = _started(session)
    if session is None or not is_remote(session):
        return
    endpoint = _ENDPOINTS.get(session)
    if endpoint is not None and _refused(endpoint, timeout=1) is not None:
        session.release_session_on_close = False  # stop() then only closes the client's channel
    session.stop()


def is_remote(session: SparkSession) -> bool:
    return not hasattr(session, "_jsparkSession")


def serve(settings: SparkSettings | None, endpoint: Endpoint, *, ready: Callable[[str], None],
          conf: dict[str, str] | None = None,
          stop_when: Callable[[SparkSession], Callable[[], bool]] | None = None,
          poll_seconds: float = 5.0) -> None:
    """Run a Spark Connect server at ``endpoint`` until SIGTERM or SIGINT: a local Spark (the
    configured ``master``, memory and ``conf``, the JDBC drivers on the driver's class path, UTC,
    the log filter that drops passwords) with Spark's Connect plugin listening there. ``conf``:
    the JVM's settings already made (the shared server's); ``stop_when(session)``: a check, asked
    every ``poll_seconds``, that ends the server when it answers True (the shared server's idle stop)."""
    conf = dict(conf) if conf is not None else local_spark_conf(settings)
    conf.update({
        "spark.app.name": "transfer_platform Spark Connect server",
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": endpoint.host,
        "spark.connect.grpc.binding.port": str(endpoint.port),
    })
    for variable in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):  # they would make it a client
        os.environ.pop(variable, None)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    session = session_from_conf(conf)
    ready(f"Spark Connect server listening on {endpoint.url} (Spark {session.version}, master "
          f"{conf['spark.master']}); stop it with Ctrl-C or SIGTERM")
    check = stop_when(session) if stop_when is not None else None
    while not stop.wait(poll_seconds if check is not None else None):
        if check is not None and check():
            break
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
