"""Opening database connections from configuration, with errors that name host and port.

Used by sources and destinations alike. Passwords are resolved from their environment variable
at the moment of connecting and never formatted into a message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.config.models import DatabaseConnection
from transfer_platform.errors import ConnectionFailure

if TYPE_CHECKING:
    import psycopg

CONNECT_TIMEOUT_SECONDS = 10


def password_of(connection: DatabaseConnection, where: str) -> str | None:
    return None if connection.password is None else connection.password.resolve(where).get_secret_value()


def connect_postgres(connection: DatabaseConnection, *, what: str, autocommit: bool = False) -> psycopg.Connection:
    """A psycopg connection in UTC; ``ConnectionFailure`` naming host and port if it fails."""
    import psycopg

    try:
        conn = psycopg.connect(
            host=connection.host,
            port=connection.port,
            dbname=connection.database,
            user=connection.username,
            password=password_of(connection, f"{what}.connection.password"),
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            autocommit=autocommit,
            options="-c TimeZone=UTC",
            application_name="transfer_platform",
        )
    except psycopg.OperationalError as exc:
        raise ConnectionFailure(
            what, host=connection.host, port=connection.port,
            reason=_first_line(str(exc)),
            fix="check that the database is running and accepts connections, and the host, port, "
                "database, username and password variable in the configuration",
        ) from None
    return conn


def postgres_jdbc_url(connection: DatabaseConnection) -> str:
    return f"jdbc:postgresql://{connection.host}:{connection.port}/{connection.database}"


def jdbc_properties(connection: DatabaseConnection, where: str) -> dict[str, str]:
    props = {"user": connection.username}
    password = password_of(connection, where)
    if password is not None:
        props["password"] = password
    return props


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else text


def spark_error_reason(exc: BaseException) -> str:
    """The useful first line of a Spark/py4j error (a Java exception's message)."""
    text = str(exc)
    for marker in ("PSQLException:", "SQLException:", "AnalysisException:", "Exception:"):
        if marker in text:
            return _first_line(text.split(marker, 1)[1])
    return _first_line(text)
