"""The clickhouse-connect client (a server over HTTP(S), or an embedded chDB data folder,
``chdb://<path>``) and its errors as the platform's (its session: ``sql.session.ClickhouseSession``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from transfer_platform.destinations.clickhouse.dialect import quote
from transfer_platform.errors import ConnectionFailure, MissingPrivilege

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

    from transfer_platform.vendors.clickhouse import ClickhouseDestination

CONNECT_FIX = ("check that the server is running and accepts HTTP(S) connections, and the host, port, secure, "
               "username and password variable in the configuration")
LOGIN_FIX = "check connection.username and the environment variable connection.password names"
CHDB_BUSY_FIX = ("chDB lets one process open a data folder at a time: end the other process using connection.path "
                 "(a reader, another transfer), then run this one again")
#: ClickHouse's error codes
ACCESS_DENIED, UNKNOWN_DATABASE, TABLE_EXISTS, UNKNOWN_TABLE = 497, 81, 57, 60
LOGIN_REFUSED = (192, 193, 194, 516)


def error_code(exc: BaseException) -> int | None:
    match = re.search(r"Code: (\d+)\.", str(exc))
    return int(match.group(1)) if match else None


def first_line(exc: BaseException) -> str:
    """The server's own sentence: no client preamble, URL, stack or version; 300 characters at most."""
    head, found, tail = str(exc).partition("DB::Exception:")
    line = ((tail if found else head).strip().splitlines() or [type(exc).__name__])[0].strip()
    return re.sub(r"\s*\(version [^)]*\)\s*$", "", line)[:300]


def connect(destination: ClickhouseDestination, what: str) -> Client:
    """A client of the server (``host``) or of the chDB folder (``path``: chDB, a large wheel, is
    imported only then); the password given to the client only."""
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
    c, line = destination.connection, first_line(exc)
    reason, fix = {
        **dict.fromkeys(LOGIN_REFUSED, (f"the server refused the log-in of user {c.username or 'default'!r} "
                                        f"({line})", LOGIN_FIX)),
        UNKNOWN_DATABASE: (f"database {c.database!r} does not exist", f"create it (CREATE DATABASE "
                           f"{quote(c.database)}) as an administrator, or correct connection.database"),
    }.get(error_code(exc), (line, CONNECT_FIX if c.path is None else CHDB_BUSY_FIX))
    where = {} if c.path is not None else {"host": c.host, "port": c.server_port}
    return ConnectionFailure(what, **where, reason=reason, fix=fix)


def missing_privilege(destination: ClickhouseDestination, what: str, exc: BaseException) -> MissingPrivilege:
    c, line = destination.connection, first_line(exc)
    user = c.username or "default"
    match = re.search(r"necessary to have the grant (.+?)(?:\.? \(ACCESS_DENIED\)|$)", line)
    wanted = (match.group(1).rstrip(".") if match else
              f"CREATE TABLE, INSERT, SELECT, ALTER, DROP TABLE, TRUNCATE ON {quote(c.database)}.*")
    return MissingPrivilege(what, role=user, reason=line, grant=f"GRANT {wanted} TO {quote(user)}")
