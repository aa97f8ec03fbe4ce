"""Opening database connections from configuration, with errors that name host and port.

Used by sources and destinations alike. Passwords are resolved from their environment variable
at the moment of connecting and never formatted into a message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.config.connection_settings import DatabaseConnection
from transfer_platform.errors import ConnectionFailure

if TYPE_CHECKING:
    import psycopg
    import pymysql

CONNECT_TIMEOUT_SECONDS = 10


def password_of(connection: DatabaseConnection, where: str) -> str | None:
    return None if connection.password is None else connection.password.resolve(where).get_secret_value()


def postgres_connect_kwargs(connection: DatabaseConnection, *, what: str) -> dict:
    """``psycopg.connect`` arguments (the password resolved): UTC, our application name."""
    from transfer_platform.network.addresses import pinned_hostaddr

    return {
        "host": connection.host,
        **pinned_hostaddr(connection),  # a guarded destination's checked address
        "port": connection.port,
        "dbname": connection.database,
        "user": connection.username,
        "password": password_of(connection, f"{what}.connection.password"),
        "connect_timeout": CONNECT_TIMEOUT_SECONDS,
        "options": "-c TimeZone=UTC",
        "application_name": "transfer_platform",
    }


def connect_postgres(connection: DatabaseConnection, *, what: str, autocommit: bool = False) -> psycopg.Connection:
    """A psycopg connection in UTC; ``ConnectionFailure`` naming host and port if it fails."""
    import psycopg

    try:
        conn = psycopg.connect(**postgres_connect_kwargs(connection, what=what), autocommit=autocommit)
    except psycopg.OperationalError as exc:
        raise ConnectionFailure(
            what, host=connection.host, port=connection.port,
            reason=_first_line(str(exc)),
            fix="check that the database is running and accepts connections, and the host, port, "
                "database, username and password variable in the configuration",
        ) from None
    return conn


def mysql_connect_kwargs(connection: DatabaseConnection, *, what: str, **settings: object) -> dict:
    """``pymysql.connect`` arguments (the password resolved, a guarded destination's checked address:
    Spark's workers connect past our resolver): UTC, autocommit on; ``settings`` added or replacing."""
    from transfer_platform.network.addresses import pinned_host

    return {"host": pinned_host(connection), "port": connection.port, "user": connection.username,
            "password": password_of(connection, f"{what}.connection.password") or "", "database": connection.database,
            "connect_timeout": CONNECT_TIMEOUT_SECONDS, "autocommit": True, "charset": "utf8mb4",
            "init_command": "SET time_zone = '+00:00'", **settings}


def connect_mysql(connection: DatabaseConnection, *, what: str, database: str | None = None,
                  read_timeout: int | None = None) -> pymysql.Connection:
    """A PyMySQL connection in UTC (``time_zone = '+00:00'``), autocommit on; ``ConnectionFailure``
    naming host and port if it fails. ``database`` overrides the connection's database;
    ``read_timeout``: the longest a call waits for the server (a source's ``read_timeout_seconds``)."""
    import pymysql

    try:
        return pymysql.connect(**mysql_connect_kwargs(connection, what=what, database=database or connection.database,
                                                      read_timeout=read_timeout))
    except pymysql.err.OperationalError as exc:
        raise ConnectionFailure(
            what, host=connection.host, port=connection.port,
            reason=_first_line(str(exc.args[-1]) if exc.args else str(exc)),
            fix="check that the database is running and accepts connections, and the host, port, "
                "database, username and password variable in the configuration",
        ) from None


def _jdbc_host(connection: DatabaseConnection) -> str:
    """The host for a JDBC URL: a guarded destination's checked address (Spark's executors
    connect with it, past this process's resolver)."""
    from transfer_platform.network.addresses import pinned_host

    host = pinned_host(connection)
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def postgres_jdbc_url(connection: DatabaseConnection) -> str:
    return f"jdbc:postgresql://{_jdbc_host(connection)}:{connection.port}/{connection.database}"


def mysql_jdbc_url(connection: DatabaseConnection, database: str | None = None) -> str:
    """A ``jdbc:mysql:`` URL (Spark picks its MySQL dialect, backticks, from that prefix; the
    MariaDB driver accepts it). The database is written as is: the driver does not decode it."""
    return f"jdbc:mysql://{_jdbc_host(connection)}:{connection.port}/{database or connection.database}"


def jdbc_properties(connection: DatabaseConnection, where: str) -> dict[str, str]:
    """Spark JDBC ``user``/``password`` options. The password crosses into the JVM through py4j,
    whose DEBUG log writes every command it sends (resolving it made every Python log record
    redact it, see ``config/secrets.py``), and Spark logs the JDBC properties at DEBUG when it
    connects: the JVM's log drops such lines first (``spark_session.protect_jvm_logs``)."""
    from transfer_platform.runtime.spark_session import protect_jvm_logs

    props = {"user": connection.username}
    password = password_of(connection, where)
    if password is not None:
        protect_jvm_logs()
        props["password"] = password
    return props


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else text


def spark_error_reason(exc: BaseException) -> str:
    """The useful first line of a Spark/py4j error (a Java exception's message)."""
    text = str(exc)
    if "Traceback (most recent call last)" in text:  # raised in a Python worker: its last line
        # (Spark Connect ends the message with a line of its own: "SQLSTATE: 38000")
        last = [line.strip() for line in text.splitlines()
                if line.strip() and not line.strip().startswith("SQLSTATE:")][-1]
        return last.split(": ", 1)[1] if ": " in last else last
    for marker in ("PSQLException:", "SQLException:", "AnalysisException:", "Exception:"):
        if marker in text:
            return _first_line(text.split(marker, 1)[1])
    return _first_line(text)
