"""PostgreSQL: the source (read over JDBC, or by psycopg for small windows) and the destination,
their configuration, their records and the SQL text both sides write."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pydantic import Field, field_validator, model_validator

from transfer_platform.config.connection_settings import DatabaseConnection, S3Connection
from transfer_platform.config.entries import (
    DatabaseSourceBase,
    DestinationBase,
    Place,
    StrictModel,
    folder_place,
    refusal,
    server_host,
)
from transfer_platform.core.sql import STANDARD
from transfer_platform.vendors.record import Vendor

#: names and literals as PostgreSQL reads them: the planners' default (``core/sql.py``'s ``SqlText``)
SQL_TEXT = STANDARD

#: longest schema name: PostgreSQL silently truncates longer identifiers (NAMEDATALEN - 1 bytes),
#: which could select another tenant's schema
POSTGRES_MAX_IDENTIFIER_BYTES = 63


# -- the source ------------------------------------------------------------------------------


class SourceStaging(StrictModel):
    """Source staging (off unless set): the due incremental transfers of a model read its changed
    rows for all their tenants in one query, staged as Parquet per tenant in ``path`` (a local or
    mounted folder shared by every process that runs transfers) or in the bucket ``s3`` (the
    connection fields of an S3 destination), each transfer taking its tenant's rows from there
    (``transfer_platform/sources/shared_reads.py``). Exactly one of ``path`` and ``s3``."""

    path: str | None = Field(default=None, min_length=1,
                             description="a folder shared by the processes that run transfers")
    s3: S3Connection | None = Field(default=None, description="a bucket every process that runs transfers reaches")
    max_age_hours: float = Field(default=24, gt=0, le=24 * 7)

    @field_validator("path")
    @classmethod
    def _folder(cls, value: str | None) -> str | None:
        if value is not None and "://" in value:
            raise ValueError(f"staging.path {value!r} is not a folder: a bucket is given as staging.s3 "
                             "(staging: {s3: {bucket: ..., prefix: ..., endpoint_url: ..., access_key_id: "
                             "${VAR}, secret_access_key: ${VAR}}}); path is for a local or mounted folder")
        return value

    def place(self) -> Place:
        """Where the staged rows live (``validate`` refuses a destination there: its recipient
        would see every tenant's rows)."""
        return self.s3.place() if self.s3 is not None else folder_place(Path(self.path), "staging folder")

    @model_validator(mode="after")
    def _one_place(self) -> SourceStaging:
        if (self.path is None) == (self.s3 is None):
            which = "both" if self.path is not None else "neither"
            raise ValueError(f"staging needs exactly one of path (a folder) and s3 (a bucket: {{bucket, prefix, "
                             f"region, endpoint_url, access_key_id, secret_access_key, path_style}}); it has {which}")
        return self


class PostgresSource(DatabaseSourceBase):
    vendor: Literal["postgres"]
    connection: DatabaseConnection
    staging: SourceStaging | None = None

    @model_validator(mode="after")
    def _staged_tenancy(self) -> PostgresSource:
        if self.staging is not None and self.tenancy != "multi_tenant":
            raise ValueError("staging reads several tenants in one query: it needs tenancy: multi_tenant "
                             "(this source is schema-tenanted); remove staging from the source")
        return self


def _schema_name(tenant_id: str, uses_source_query: bool) -> str | None:
    size = len(tenant_id.encode())
    if size > POSTGRES_MAX_IDENTIFIER_BYTES:
        return (f"it is {size} bytes long; PostgreSQL schema names are at most "
                f"{POSTGRES_MAX_IDENTIFIER_BYTES} bytes (longer names are truncated, which could "
                "select another tenant's schema)")
    return None


SOURCE = Vendor("postgres", "source", "transfer_platform.sources.jdbc", "PostgresReader", PostgresSource,
                drivers=("psycopg",), jdbc_jars=("/usr/share/java/postgresql.jar",),
                default_lookback_seconds=30, tenant_id_rule=_schema_name)


# -- the destination -------------------------------------------------------------------------


class PostgresDestination(DestinationBase):
    vendor: Literal["postgres"]
    connection: DatabaseConnection

    @model_validator(mode="after")
    def _names_kept_whole(self) -> PostgresDestination:
        """PostgreSQL keeps 63 bytes of a name and drops the rest without a word: two recipients'
        long schema names differing only after byte 63 would be one schema, both tenants' rows in
        one table. Such a name is refused, not truncated."""
        c = self.connection
        for field, name in (("database", c.database), ("schema", c.schema_)):
            size = len((name or "").encode())
            if size > POSTGRES_MAX_IDENTIFIER_BYTES:
                raise refusal(f"connection.{field} is {size} bytes long; PostgreSQL keeps only the first "
                              f"{POSTGRES_MAX_IDENTIFIER_BYTES} bytes of a name, so one is at most "
                              f"{POSTGRES_MAX_IDENTIFIER_BYTES} bytes (a longer one would be another name's prefix)",
                              f"use a {field} name of at most {POSTGRES_MAX_IDENTIFIER_BYTES} bytes")
        return self

    def place(self) -> Place:
        c = self.connection
        host = server_host(c.host)
        schema = c.schema_ or "public"
        return Place("postgres", (host, c.port, c.database), (schema,),
                     f"PostgreSQL {host}:{c.port}, database {c.database}, schema {schema}")


COLUMN_TYPES = MappingProxyType({
    "string": "text",
    "integer": "bigint",
    "float": "double precision",
    "boolean": "boolean",
    "timestamp": "timestamp with time zone",
    "date": "date",
    "decimal": "numeric(38,9)",
    "json": "jsonb",
})

DESTINATION = Vendor("postgres", "destination", "transfer_platform.destinations.postgres.writer", "PostgresWriter",
                     PostgresDestination, drivers=("psycopg", "pyarrow"), column_types=COLUMN_TYPES,
                     state_store="status row",
                     empty_table_load="swap", default_port=5432)
