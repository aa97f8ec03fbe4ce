"""Connecting to the destination, and what MySQL refuses turned into errors that name the fix
(the grant a loader lacks, a lost connection)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from transfer_platform.destinations.mysql import dialect as sql
from transfer_platform.errors import ConnectionFailure, MissingPrivilege
from transfer_platform.runtime.connections import CONNECT_TIMEOUT_SECONDS, password_of

if TYPE_CHECKING:
    from transfer_platform.config.connection_settings import DatabaseConnection
    from transfer_platform.vendors.mysql import MysqlDestination

#: every privilege the loader needs, on its own database only (docs/permissions.md)
LOADER_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER")
#: the server's "denied" error codes: table, column, database, specific privilege, routine
DENIED = {1142, 1143, 1044, 1227, 1370}
_COMMAND = re.compile(r"^(\w+(?: \w+)?) command denied", re.IGNORECASE)


def first_line(exc: BaseException) -> str:
    reason = exc.args[-1] if getattr(exc, "args", None) else exc
    return (str(reason).strip().splitlines() or [type(exc).__name__])[0]


def connect_kwargs(connection: DatabaseConnection, *, what: str) -> dict:
    """``pymysql.connect`` arguments (the password resolved): UTC, strict, LOCAL INFILE allowed."""
    from transfer_platform.network.addresses import pinned_host

    # a guarded destination's checked address: Spark's Python workers connect past our resolver
    return {"host": pinned_host(connection), "port": connection.port, "user": connection.username,
            "password": password_of(connection, f"{what}.connection.password") or "",
            "database": connection.database, "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            "autocommit": True, "charset": "utf8mb4", "local_infile": True,
            "init_command": sql.SESSION_SETUP}


def grant_statement(connection: DatabaseConnection, privileges: tuple[str, ...] = LOADER_PRIVILEGES) -> str:
    return (f"GRANT {', '.join(privileges)} ON {sql.q(connection.database)}.* TO "
            f"'{connection.username.replace(chr(39), chr(39) * 2)}'@'%'")


def missing_privilege(destination: MysqlDestination, what: str, exc: BaseException) -> MissingPrivilege:
    """The refused statement's privilege, named with the GRANT that gives it."""
    connection = destination.connection
    reason = first_line(exc)
    found = _COMMAND.search(reason)
    command = found.group(1).upper() if found else None
    needed = (command,) if command in LOADER_PRIVILEGES else LOADER_PRIVILEGES
    return MissingPrivilege(
        what, role=connection.username, reason=reason,
        grant=f"{grant_statement(connection, needed)} (a loader needs {', '.join(LOADER_PRIVILEGES)} "
              f"on its database {connection.database!r}, nothing else)")


@contextmanager
def translated_errors(destination: MysqlDestination, what: str) -> Iterator[None]:
    """A refused statement becomes ``MissingPrivilege`` with its grant; a lost connection
    ``ConnectionFailure`` naming host and port (never the password)."""
    import pymysql

    try:
        yield
    except pymysql.err.MySQLError as exc:
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        if code in DENIED:
            raise missing_privilege(destination, what, exc) from None
        if isinstance(exc, pymysql.err.OperationalError) and code is not None and code >= 2000:
            connection = destination.connection
            raise ConnectionFailure(what, host=connection.host, port=connection.port,
                                    reason=first_line(exc)) from None
        raise
