"""ClickHouse: the destination's configuration and its record. A server reached over HTTP(S)
(``host``), or, for a recipient's or a test's local copy, an embedded chDB data folder
(``path``): one or the other, never both."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pydantic import ConfigDict, Field

from transfer_platform.config.entries import (
    DestinationBase,
    Place,
    StrictModel,
    folder_place,
    server_host,
)
from transfer_platform.config.secrets import EnvRef
from transfer_platform.vendors.record import CLICKHOUSE, Vendor, one_query

#: ClickHouse's HTTP ports, plain and over TLS
HTTP_PORT, HTTPS_PORT = 8123, 8443


class ClickhouseConnection(StrictModel):
    host: str | None = Field(default=None, min_length=1)  # a server, over HTTP(S)
    port: int | None = Field(default=None, gt=0, lt=65536)  # default 8123, or 8443 with secure
    username: str | None = Field(default=None, min_length=1)  # default: default
    password: EnvRef | None = None
    database: str = Field(min_length=1)  # the recipient's database (created beforehand on a server)
    secure: bool | None = None  # HTTPS (TLS); default false
    path: Path | None = None  # an embedded chDB data folder instead of a server

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def server_port(self) -> int:
        return self.port or (HTTPS_PORT if self.secure else HTTP_PORT)


class ClickhouseDestination(DestinationBase):
    """A ClickHouse database (``connection.database``): one ReplacingMergeTree table per model, its
    state in the table's comment, ``_transfer_status`` a view of them."""

    vendor: Literal["clickhouse"]
    connection: ClickhouseConnection

    def place(self) -> Place:
        c = self.connection
        if c.path is not None:
            return folder_place(c.path, "chDB data folder")
        host = server_host(c.host or "")
        return Place("clickhouse", (host, c.server_port), (c.database,),
                     f"ClickHouse {host}:{c.server_port}, database {c.database}")

    def problems(self, path: str) -> list:
        from transfer_platform.errors import Problem

        c = self.connection
        if (c.host is None) == (c.path is None):
            return [Problem(f"{path}.connection", "give either host (a ClickHouse server) or path (an embedded "
                            "chDB data folder), not both and not neither",
                            "set connection.host for a server, or connection.path for a local chDB folder")]
        if c.path is not None:
            extra = [name for name in ("port", "username", "password", "secure") if getattr(c, name) is not None]
            if extra:
                return [Problem(f"{path}.connection.{extra[0]}", f"{', '.join(extra)} has no effect on an embedded "
                                "chDB folder (connection.path): it has no network, users or TLS",
                                f"remove {', '.join(extra)}, or give connection.host instead of path")]
        return []


#: as system.columns names them; a column outside the key and the last-modified column is
#: Nullable(<type>) (the dialect adds it); JSON text is held as String, exactly as sent
COLUMN_TYPES = MappingProxyType({
    "string": "String",
    "integer": "Int64",
    "float": "Float64",
    "boolean": "Bool",
    "timestamp": "DateTime64(6, 'UTC')",
    "date": "Date32",
    "decimal": "Decimal(38, 9)",
    "json": "String",
})

DESTINATION = Vendor("clickhouse", "destination", "transfer_platform.destinations.clickhouse.writer",
                     "ClickhouseWriter", ClickhouseDestination, drivers=("clickhouse_connect", "pyarrow"),
                     column_types=COLUMN_TYPES, empty_table_load="clone-and-exchange", state_store="table comment",
                     extra=CLICKHOUSE,
                     refuses=(one_query("destination", "a window is inserted and swapped in by one session, "
                                                       "statement after statement"),))
