"""Snowflake (written with snowflake-connector-python): the destination's configuration and its
record."""

from __future__ import annotations

from types import MappingProxyType
from typing import Literal

from pydantic import ConfigDict, Field

from transfer_platform.config.entries import DestinationBase, Place, StrictModel
from transfer_platform.config.secrets import EnvRef
from transfer_platform.vendors.record import SNOWFLAKE, Vendor


class SnowflakeConnection(StrictModel):
    """An account, the login (a password or an RSA private key in PEM, each an environment
    reference) and where the tables go. ``database``, ``schema``, ``warehouse`` and ``role`` are
    identifiers as Snowflake stores them (quoted as written: an object created unquoted is named
    in upper case, ``ANALYTICS``). ``host``, ``port`` and ``protocol`` override the account's
    address (a private link, a proxy); by default the connector derives it from ``account``."""

    account: str = Field(min_length=1)
    user: str = Field(min_length=1)
    password: EnvRef | None = None
    private_key: EnvRef | None = None  # an unencrypted PKCS#8 PEM key (key-pair authentication)
    database: str = Field(min_length=1)
    schema_: str = Field(alias="schema", min_length=1)
    warehouse: str = Field(min_length=1)
    role: str | None = None  # default: the user's default role
    host: str | None = None
    port: int | None = Field(default=None, gt=0, lt=65536)
    protocol: Literal["https", "http"] = "https"

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SnowflakeDestination(DestinationBase):
    """A Snowflake schema (the recipient's, created beforehand): one table per model beside
    ``_transfer_status``, ``_transfer_locks`` and the stage ``_tp_stage``."""

    vendor: Literal["snowflake"]
    connection: SnowflakeConnection
    #: a transfer's hold on a model expires this long after its last sign of life (a lock, a
    #: window's commit); a transfer that died is then taken over by the next one
    lock_lease_seconds: int = Field(default=900, ge=2)

    def place(self) -> Place:
        c = self.connection
        return Place("snowflake", (c.account.lower(), c.host or ""), (c.database, c.schema_),
                     f"Snowflake account {c.account}, schema {c.database}.{c.schema_}")

    def problems(self, path: str) -> list:
        from transfer_platform.errors import Problem

        c = self.connection
        if (c.password is None) == (c.private_key is None):
            return [Problem(f"{path}.connection", "give exactly one of password and private_key",
                            "password: ${SNOWFLAKE_PASSWORD} or private_key: ${SNOWFLAKE_PRIVATE_KEY} (a PEM key)")]
        if c.protocol == "http" and c.host is None:
            return [Problem(f"{path}.connection.protocol", "http needs a host (an emulator or a proxy); "
                            "Snowflake itself answers over https", "remove protocol, or give host and port")]
        return []


#: as the model's tables declare them; the catalog reads them back as :func:`matches` says
COLUMN_TYPES = MappingProxyType({
    "string": "VARCHAR",
    "integer": "NUMBER(38,0)",
    "float": "FLOAT",
    "boolean": "BOOLEAN",
    "timestamp": "TIMESTAMP_TZ(6)",
    "date": "DATE",
    "decimal": "NUMBER(38,9)",
    "json": "VARIANT",
})

DESTINATION = Vendor("snowflake", "destination", "transfer_platform.destinations.snowflake.writer", "SnowflakeWriter",
                     SnowflakeDestination, drivers=("snowflake.connector", "pyarrow", "pyarrow.parquet"),
                     empty_table_load="copy-into", state_store="status row", column_types=COLUMN_TYPES,
                     extra=SNOWFLAKE, default_port=443)
