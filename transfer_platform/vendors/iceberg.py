"""Apache Iceberg tables (written with pyiceberg) in a SQL catalog kept in PostgreSQL: the
destination's configuration and its record."""

from __future__ import annotations

from types import MappingProxyType
from typing import Literal

from transfer_platform.config.connection_settings import DatabaseConnection, FolderOrBucket
from transfer_platform.config.entries import DestinationBase, Name, Place, StrictModel, server_host
from transfer_platform.vendors.record import ICEBERG, Vendor, one_query


class IcebergConnection(StrictModel):
    """An Iceberg SQL catalog in PostgreSQL, and the warehouse its tables' files are in."""

    catalog: DatabaseConnection  # the catalog's database (``schema``: where its two tables are)
    catalog_name: Name = "transfer_platform"  # the catalog's name in those tables
    namespace: Name | None = None  # the recipient's namespace (default: the destination's recipient)
    warehouse: FolderOrBucket  # a folder, or s3://<bucket>/<prefix>/


class IcebergDestination(DestinationBase):
    """Apache Iceberg tables (one per model) in a namespace of a SQL catalog, written with pyiceberg."""

    vendor: Literal["iceberg"]
    connection: IcebergConnection

    @property
    def namespace(self) -> str:
        return self.connection.namespace or self.recipient

    def place(self) -> Place:
        c = self.connection.catalog
        host = server_host(c.host)
        schema = c.schema_ or "public"
        return Place("iceberg", (host, c.port, c.database, schema, self.connection.catalog_name),
                     (self.namespace,), f"Iceberg catalog {self.connection.catalog_name} in PostgreSQL "
                     f"{host}:{c.port}, database {c.database}, schema {schema}, namespace {self.namespace}")


#: Iceberg's type names (pyiceberg's spelling)
COLUMN_TYPES = MappingProxyType({
    "string": "string",
    "integer": "long",
    "float": "double",
    "boolean": "boolean",
    "timestamp": "timestamptz",
    "date": "date",
    "decimal": "decimal(38, 9)",
    "json": "string",
})

DESTINATION = Vendor("iceberg", "destination", "transfer_platform.destinations.iceberg.writer", "IcebergWriter",
                     IcebergDestination, drivers=("pyiceberg.catalog.sql", "pyarrow", "psycopg"),
                     column_types=COLUMN_TYPES, extra=ICEBERG,
                     refuses=(one_query("destination", "pyiceberg writes each window as one snapshot from the "
                                                       "driver, there are no queries to run in parallel"),))
