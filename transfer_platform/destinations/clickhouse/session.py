"""The clickhouse-connect client as the SQL writer uses it, its connection, and what its errors
mean: a server over HTTP(S), or an embedded chDB data folder (``chdb://<path>``, imported only
then: its wheel is large)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from transfer_platform.destinations.sql.session import Session
from transfer_platform.errors import ConnectionFailure, MissingPrivilege

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

    from transfer_platform.destinations.sql.dialect import Statement
    from transfer_platform.vendors.clickhouse import ClickhouseDestination

CONNECT_FIX = ("check that the server is running and accepts HTTP(S) connections, and the host, port, secure, "
               "username and password variable in the configuration")
LOGIN_FIX = "check connection.username and the environment variable connection.password names"
#: ClickHouse's error codes: access denied; log-in refused; an unknown database; a table that exists
ACCESS_DENIED = 497
LOGIN_REFUSED = (192, 193, 194, 516)
UNKNOWN_DATABASE = 81
TABLE_EXISTS = 57
UNKNOWN_TABLE = 60

_CODE = re.compile(r"Code: (\d+)\.")
_GRANT = re.compile(r"necessary to have the grant (.+?)(?:\. \(ACCESS_DENIED\)|\.? \(ACCESS_DENIED\)|$)")


def error_code(exc: BaseException) -> int | None:
    match = _CODE.search(str(exc))
    return int(match.group(1)) if match else None


def first_line(exc: BaseException) -> str:
    """The server's own sentence (``DB::Exception: ...``), without the client's preamble, the URL
    or the stack; cut to 300 characters."""
    text = str(exc)
    at = text.find("DB::Exception:")
    if at >= 0:
        text = text[at + len("DB::Exception:"):]
    line = (text.strip().splitlines() or [type(exc).__name__])[0].strip()
    line = re.sub(r"\s*\(version [^)]*\)\s*$", "", line)
    return line[:300]


def connect(destination: ClickhouseDestination, what: str) -> Client:
    """A client of the server (``host``) or of the embedded chDB folder (``path``); the password
    read from its variable and given to the client only; ``ConnectionFailure`` naming host and
    port (never the password) if the server cannot be reached or refuses the log-in."""
    import clickhouse_connect
    from clickhouse_connect.driver.exceptions import ClickHouseError

    c = destination.connection
    try:
        if c.path is not None:
            c.path.mkdir(parents=True, exist_ok=True)
            return clickhouse_connect.get_client(dsn=f"chdb://{c.path.resolve()}")
        password = "" if c.password is None else c.password.resolve(
            f"destinations.{destination.name}.connection.password").get_secret_value()
        return clickhouse_connect.get_client(host=c.host, port=c.server_port, username=c.username or "default",
                                             password=password, database=c.database, secure=bool(c.secure),
                                             connect_timeout=10, send_receive_timeout=300,
                                             autogenerate_session_id=False)
    except OSError as exc:
        raise ConnectionFailure(what, reason=exc.strerror or str(exc),
                                fix="give connection.path a folder this process may create and write") from None
    except ClickHouseError as exc:
        raise connection_error(destination, what, exc) from None


def connection_error(destination: ClickhouseDestination, what: str, exc: BaseException) -> ConnectionFailure:
    c = destination.connection
    code = error_code(exc)
    where = {} if c.path is not None else {"host": c.host, "port": c.server_port}
    if code in LOGIN_REFUSED:
        return ConnectionFailure(what, **where, reason=f"the server refused the log-in of user "
                                 f"{c.username or 'default'!r} ({first_line(exc)})", fix=LOGIN_FIX)
    if code == UNKNOWN_DATABASE:
        return ConnectionFailure(what, **where, reason=f"database {c.database!r} does not exist",
                                 fix=f"create it (CREATE DATABASE {quote(c.database)}) as an administrator, "
                                     "or correct connection.database")
    if c.path is not None:
        return ConnectionFailure(what, reason=first_line(exc),
                                 fix="chDB lets one process open a data folder at a time: end the other process "
                                     "using connection.path (a reader, another transfer), then run this one again")
    return ConnectionFailure(what, **where, reason=first_line(exc), fix=CONNECT_FIX)


def quote(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def missing_privilege(destination: ClickhouseDestination, what: str, exc: BaseException) -> MissingPrivilege:
    """An ACCESS_DENIED, naming the grant ClickHouse says is missing."""
    c = destination.connection
    user = c.username or "default"
    match = _GRANT.search(first_line(exc))
    wanted = match.group(1).rstrip(".") if match else f"CREATE TABLE, INSERT, SELECT, ALTER, DROP TABLE, TRUNCATE " \
                                                       f"ON {quote(c.database)}.*"
    return MissingPrivilege(what, role=user, reason=first_line(exc), grant=f"GRANT {wanted} TO {quote(user)}")


@contextmanager
def translated_errors(destination: ClickhouseDestination, what: str) -> Iterator[None]:
    """clickhouse-connect's errors as the platform's: a refused right as ``MissingPrivilege``, the
    server unreachable or the log-in refused as ``ConnectionFailure``; the rest as they are."""
    from clickhouse_connect.driver.exceptions import ClickHouseError, OperationalError

    try:
        yield
    except ClickHouseError as exc:
        code = error_code(exc)
        if code == ACCESS_DENIED:
            raise missing_privilege(destination, what, exc) from None
        if isinstance(exc, OperationalError) or code in LOGIN_REFUSED or code == UNKNOWN_DATABASE:
            raise connection_error(destination, what, exc) from None
        raise


def bound(value: Any) -> Any:
    """A parameter as the server parses it: a moment as UTC text to the microsecond."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, date):
        return value.isoformat()
    return value


def _aware(value: Any) -> Any:
    """A DateTime64 read back (naive, in UTC) as an aware moment."""
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value


class ClickhouseSession(Session):
    """Statements one at a time (ClickHouse has no multi-statement transactions: ``transaction``
    groups nothing; the writer's window commit says how a window still becomes visible at once)."""

    def __init__(self, client: Client) -> None:
        self.conn = client

    @staticmethod
    def _split(statement: Statement) -> tuple[str, dict | None]:
        if isinstance(statement, str):
            return statement, None
        text, params = statement
        return text, {k: bound(v) for k, v in dict(params).items()}

    def execute(self, statement: Statement) -> int:
        text, params = self._split(statement)
        summary = self.conn.command(text, parameters=params)
        return int(getattr(summary, "written_rows", 0) or 0)

    def all(self, statement: Statement) -> list[tuple]:
        text, params = self._split(statement)
        return [tuple(_aware(v) for v in row) for row in self.conn.query(text, parameters=params).result_rows]

    def transaction(self):
        return nullcontext()
