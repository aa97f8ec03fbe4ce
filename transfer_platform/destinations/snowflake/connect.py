"""Connecting to Snowflake with snowflake-connector-python, the session the SQL writer runs its
statements through, and what the connector raises turned into errors that name the fix (never
the password or the private key)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from transfer_platform.destinations.sql.session import Session, _split
from transfer_platform.errors import ConfigError, ConnectionFailure, MissingPrivilege
from transfer_platform.runtime.connections import CONNECT_TIMEOUT_SECONDS

if TYPE_CHECKING:
    import snowflake.connector

    from transfer_platform.destinations.sql.dialect import Statement
    from transfer_platform.vendors.snowflake import SnowflakeConnection, SnowflakeDestination

#: the rights a loader's role needs (docs/permissions.md)
LOADER_GRANTS = ("USAGE ON WAREHOUSE {warehouse}", "USAGE ON DATABASE {database}",
                 "USAGE, CREATE TABLE, CREATE STAGE ON SCHEMA {database}.{schema}")
#: the connector's errno of a failed login, of a network failure
LOGIN_FAILED = {390100, 390101, 390102, 390144, 390190, 390318, 390422, 251005, 251006}
UNREACHABLE = {250001, 250003, 251011, 251012}
#: "does not exist or not authorized", "insufficient privileges"
NOT_FOUND, NOT_ALLOWED = 2003, 3001
CONNECT_FIX = ("check account, host, port and the network path to Snowflake, then user and the password's "
               "(or private_key's) environment variable")


def first_line(exc: BaseException) -> str:
    text = getattr(exc, "raw_msg", None) or getattr(exc, "msg", None) or str(exc)
    return (str(text).strip().splitlines() or [type(exc).__name__])[0]


def connect_kwargs(destination: SnowflakeDestination) -> dict[str, Any]:
    """``snowflake.connector.connect`` arguments, the secret resolved from its variable. No
    database or schema is set on the session: every statement names its objects in full."""
    c: SnowflakeConnection = destination.connection
    where = f"destinations.{destination.name}.connection"
    kwargs: dict[str, Any] = {
        "account": c.account, "user": c.user, "warehouse": c.warehouse, "login_timeout": CONNECT_TIMEOUT_SECONDS,
        "application": "transfer_platform", "paramstyle": "pyformat", "autocommit": True,
        # LOCK_TIMEOUT: a statement waits for another transaction's locks at most one lease
        # (Snowflake's default is 12 hours), then fails and the transfer can be run again
        "session_parameters": {"TIMEZONE": "UTC", "QUERY_TAG": "transfer_platform",
                               "LOCK_TIMEOUT": destination.lock_lease_seconds,
                               "CLIENT_OUT_OF_BAND_TELEMETRY_ENABLED": False},
    }
    if c.role is not None:
        kwargs["role"] = c.role
    if c.host is not None:
        kwargs["host"] = c.host
    if c.port is not None:
        kwargs["port"] = c.port
    if c.protocol != "https":
        kwargs["protocol"] = c.protocol
    if c.password is not None:
        kwargs["password"] = c.password.resolve(f"{where}.password").get_secret_value()
    if c.private_key is not None:
        kwargs["private_key"] = private_key_der(c.private_key.resolve(f"{where}.private_key").get_secret_value(),
                                                f"{where}.private_key")
    return kwargs


def private_key_der(pem: str, where: str) -> bytes:
    """An unencrypted PEM private key as the DER bytes the connector takes."""
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        raise ConfigError(f"{where}: the variable does not hold an unencrypted PEM private key (its value is "
                          "not shown). Fix: export the key in PKCS#8 PEM form, without a passphrase") from None
    return key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def connect(destination: SnowflakeDestination, what: str) -> snowflake.connector.SnowflakeConnection:
    import logging

    import snowflake.connector

    # the connector's HTTP pool warns at each retry; the failure itself is reported, once
    logging.getLogger("snowflake.connector.vendored.urllib3.connectionpool").setLevel(logging.ERROR)
    c = destination.connection
    try:
        return snowflake.connector.connect(**connect_kwargs(destination))
    except snowflake.connector.errors.Error as exc:
        raise ConnectionFailure(what, host=c.host or f"{c.account}.snowflakecomputing.com", port=c.port or 443,
                                reason=first_line(exc), fix=CONNECT_FIX) from None


def grants(destination: SnowflakeDestination) -> str:
    c = destination.connection
    role = c.role or "<the user's role>"
    names = {"warehouse": quote(c.warehouse), "database": quote(c.database), "schema": quote(c.schema_)}
    return "; ".join(f"GRANT {g.format(**names)} TO ROLE {quote(role)}" for g in LOADER_GRANTS)


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@contextmanager
def translated_errors(destination: SnowflakeDestination, what: str) -> Iterator[None]:
    """A refused statement becomes ``MissingPrivilege`` with its grants; a lost connection
    ``ConnectionFailure``."""
    import snowflake.connector

    try:
        yield
    except snowflake.connector.errors.Error as exc:
        errno = getattr(exc, "errno", None)
        c = destination.connection
        if errno in (NOT_FOUND, NOT_ALLOWED):
            raise MissingPrivilege(
                what, role=c.role or c.user, reason=first_line(exc),
                grant=f"create the object if it is missing, else {grants(destination)}") from None
        if errno in UNREACHABLE or errno in LOGIN_FAILED or isinstance(exc, snowflake.connector.errors.OperationalError):
            raise ConnectionFailure(what, host=c.host or f"{c.account}.snowflakecomputing.com", port=c.port or 443,
                                    reason=first_line(exc), fix=CONNECT_FIX) from None
        raise


class SnowflakeSession(Session):
    """Autocommit outside :meth:`transaction`; a transaction is ``BEGIN`` ... ``COMMIT``."""

    def __init__(self, conn: snowflake.connector.SnowflakeConnection) -> None:
        self.conn = conn

    def execute(self, statement: Statement) -> int:
        text, params = _split(statement)
        with self.conn.cursor() as cursor:
            cursor.execute(text, params)
            rows = cursor.rowcount
        return int(rows or 0)

    def all(self, statement: Statement) -> list[tuple]:
        text, params = _split(statement)
        with self.conn.cursor() as cursor:
            cursor.execute(text, params)
            return [tuple(row) for row in cursor.fetchall()]

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.execute("BEGIN")
        try:
            yield
        except BaseException:
            with suppress(Exception):  # the connection may be gone: the first error is the one told
                self.execute("ROLLBACK")
            raise
        self.execute("COMMIT")
