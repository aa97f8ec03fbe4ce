"""Connecting through snowflake-connector-python, and what it raises as errors naming the fix (never
the password or the private key)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from snowflake import connector

from transfer_platform.core.sql import quote_ident as quote
from transfer_platform.errors import ConfigError, ConnectionFailure, MissingPrivilege
from transfer_platform.runtime.connections import CONNECT_TIMEOUT_SECONDS

if TYPE_CHECKING:
    from transfer_platform.vendors.snowflake import SnowflakeDestination

#: the connector's errno of a failed login or of a network failure
UNREACHABLE = {390100, 390101, 390102, 390144, 390190, 390318, 390422, 251005, 251006, 250001, 250003, 251011, 251012}
#: "does not exist or not authorized", "insufficient privileges"
NOT_FOUND, NOT_ALLOWED = 2003, 3001
CONNECT_FIX = ("check account, host, port and the network path to Snowflake, then user and the password's "
               "(or private_key's) environment variable")


def first_line(exc: BaseException) -> str:
    text = getattr(exc, "raw_msg", None) or getattr(exc, "msg", None) or str(exc)
    return (str(text).strip().splitlines() or [type(exc).__name__])[0]


def connect_kwargs(destination: SnowflakeDestination) -> dict[str, Any]:
    """The connector's arguments, the secret resolved; no database or schema: statements name tables in full."""
    c, where = destination.connection, f"destinations.{destination.name}.connection"
    kwargs: dict[str, Any] = {
        "account": c.account, "user": c.user, "warehouse": c.warehouse, "login_timeout": CONNECT_TIMEOUT_SECONDS,
        "application": "transfer_platform", "paramstyle": "pyformat", "autocommit": True,
        # LOCK_TIMEOUT: a statement waits for another transaction's locks at most one lease
        # (Snowflake's default is 12 hours), then fails and the transfer can be run again
        "session_parameters": {"TIMEZONE": "UTC", "QUERY_TAG": "transfer_platform",
                               "LOCK_TIMEOUT": destination.lock_lease_seconds,
                               "CLIENT_OUT_OF_BAND_TELEMETRY_ENABLED": False},
        **{name: getattr(c, name) for name in ("role", "host", "port") if getattr(c, name) is not None},
        **({"protocol": c.protocol} if c.protocol != "https" else {}),
    }
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


def unreachable(destination: SnowflakeDestination, what: str, exc: BaseException) -> ConnectionFailure:
    c = destination.connection
    return ConnectionFailure(what, host=c.host or f"{c.account}.snowflakecomputing.com", port=c.port or 443,
                             reason=first_line(exc), fix=CONNECT_FIX)


def connect(destination: SnowflakeDestination, what: str) -> connector.SnowflakeConnection:
    # the connector's HTTP pool warns at each retry; the failure itself is reported, once
    logging.getLogger("snowflake.connector.vendored.urllib3.connectionpool").setLevel(logging.ERROR)
    try:
        return connector.connect(**connect_kwargs(destination))
    except connector.Error as exc:
        raise unreachable(destination, what, exc) from None


@contextmanager
def translated_errors(destination: SnowflakeDestination, what: str) -> Iterator[None]:
    """A refused statement as ``MissingPrivilege`` with its grants; a lost connection as ``ConnectionFailure``."""
    try:
        yield
    except connector.Error as exc:
        errno, c = getattr(exc, "errno", None), destination.connection
        if errno in (NOT_FOUND, NOT_ALLOWED):  # named with the rights a loader's role needs (docs/permissions.md)
            role, database = quote(c.role or "<the user's role>"), quote(c.database)
            grants = "; ".join(f"GRANT {right} TO ROLE {role}" for right in (
                f"USAGE ON WAREHOUSE {quote(c.warehouse)}", f"USAGE ON DATABASE {database}",
                f"USAGE, CREATE TABLE, CREATE STAGE ON SCHEMA {database}.{quote(c.schema_)}"))
            raise MissingPrivilege(what, role=c.role or c.user, reason=first_line(exc),
                                   grant=f"create the object if it is missing, else {grants}") from None
        if errno in UNREACHABLE or isinstance(exc, connector.OperationalError):
            raise unreachable(destination, what, exc) from None
        raise
