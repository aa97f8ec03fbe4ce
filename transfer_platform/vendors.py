"""Every vendor, one record each: the one place a new source or destination is registered.

A :class:`Vendor` says what the rest of the platform needs to know about one ``vendor:`` value of
the configuration file: the module and class that implement it (``sources/<vendor>.py``,
``destinations/<vendor>.py``, imported only when a transfer first needs it, so that ``validate``
and the Dagster definitions load no driver), its configuration class in ``config/models.py``, the
drivers it needs, the settings it has no use for (``validate`` refuses them), and its own facts:
a source's default lookback and what its tenant ids can be, a destination's type names and
whether it can delete rows. The configuration's checks, the core types and the run worker read
these records; nothing else switches on a vendor's name, and the vendor lists of the messages
come from here.

Importing this module imports only the standard library: no driver, no Spark, no Dagster.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

#: longest schema name: PostgreSQL silently truncates longer identifiers (NAMEDATALEN - 1 bytes),
#: which could select another tenant's schema; MySQL refuses names over 64 characters
POSTGRES_MAX_IDENTIFIER_BYTES = 63
MYSQL_MAX_IDENTIFIER_CHARS = 64
#: the lookback of a source whose record does not name one (the reference system's, 5 minutes)
DEFAULT_LOOKBACK_SECONDS = 300


@dataclass(frozen=True)
class Refusal:
    """A setting that has no effect on a vendor: ``validate`` refuses any value but ``allowed``
    (the setting's default), saying ``has no effect on a <vendor> <kind>: <reason>``."""

    setting: str  # its path inside the entry, as the file writes it ("connection.schema")
    allowed: object
    reason: str
    fix: str


#: why a tenant id cannot name its tenant's schema (``None``: it can); its arguments are the
#: tenant id and whether the model reads a ``source_query``
TenantIdRule = Callable[[str, bool], "str | None"]


@dataclass(frozen=True, eq=False)
class Vendor:
    """One ``vendor:`` value of the configuration file and what the platform knows of it."""

    name: str  # the ``vendor:`` value
    kind: Literal["source", "destination"]
    module: str  # the module of its reader (SourceReader) or writer (DestinationWriter)
    class_name: str  # that class
    config: str  # its configuration class in config/models.py (the ``vendor:`` discriminator's choice)
    drivers: tuple[str, ...] = ()  # the Python modules of its client libraries (imported only at run time)
    jdbc_jars: tuple[str, ...] = ()  # the JDBC drivers Spark loads to read it (Debian's packages)
    refuses: tuple[Refusal, ...] = ()  # settings without effect on it
    # -- a source's ---------------------------------------------------------------------------
    default_lookback_seconds: int = DEFAULT_LOOKBACK_SECONDS  # when lookback_window is not set
    tenant_container: str = "schema"  # what a schema-tenanted source's tenant id names
    tenant_id_rule: TenantIdRule | None = None  # the limits on such a name, beyond "no NUL"
    # -- a destination's ------------------------------------------------------------------------
    column_types: Mapping[str, str] = field(default_factory=dict)  # a model's data_type -> its type name
    only_adds_files: bool = False  # rows gone from the source cannot be deleted (no delete sweep)

    def implementation(self) -> type:
        """The class that implements this vendor (importing its module, drivers and all)."""
        return getattr(importlib.import_module(self.module), self.class_name)

    def config_class(self) -> type:
        """Its pydantic class in ``config/models.py``."""
        return getattr(importlib.import_module("transfer_platform.config.models"), self.config)

    def tenant_id_problem(self, tenant_id: str, *, uses_source_query: bool) -> str | None:
        """Why ``tenant_id`` cannot name a tenant's schema (MySQL: database; Parquet: folder) in
        a schema-tenanted source of this vendor, or ``None`` if it can."""
        if "\x00" in tenant_id:
            return "it contains a NUL character"
        return self.tenant_id_rule(tenant_id, uses_source_query) if self.tenant_id_rule else None


# -- the rules of each vendor ----------------------------------------------------------------


def _postgres_schema(tenant_id: str, uses_source_query: bool) -> str | None:
    size = len(tenant_id.encode())
    if size > POSTGRES_MAX_IDENTIFIER_BYTES:
        return (f"it is {size} bytes long; PostgreSQL schema names are at most "
                f"{POSTGRES_MAX_IDENTIFIER_BYTES} bytes (longer names are truncated, which could "
                "select another tenant's schema)")
    return None


def _mysql_database(tenant_id: str, uses_source_query: bool) -> str | None:
    if len(tenant_id) > MYSQL_MAX_IDENTIFIER_CHARS:
        return f"MySQL database names are at most {MYSQL_MAX_IDENTIFIER_CHARS} characters"
    if tenant_id != tenant_id.rstrip(" "):
        return "MySQL database names cannot end with a space"
    if uses_source_query and ("/" in tenant_id or "?" in tenant_id):
        return ("a source_query runs with the tenant's database as the JDBC URL's database, "
                "where '/' and '?' are syntax (the driver does not decode them); source_table "
                "has no such limit")
    return None


def _lake_folder(tenant_id: str, uses_source_query: bool) -> str | None:
    if tenant_id in (".", "..") or "/" in tenant_id:
        return "it must be a single folder name (no '/', not '.' or '..')"
    return None


def _one_query(kind: str, reason: str) -> Refusal:
    return Refusal("max_concurrent_queries_per_transfer", 1, reason,
                   f"remove max_concurrent_queries_per_transfer from this {kind}")


_POSTGRES_TYPES = MappingProxyType({
    "string": "text",
    "integer": "bigint",
    "float": "double precision",
    "boolean": "boolean",
    "timestamp": "timestamp with time zone",
    "date": "date",
    "decimal": "numeric(38,9)",
    "json": "jsonb",
})

#: Iceberg's type names (pyiceberg's spelling)
_ICEBERG_TYPES = MappingProxyType({
    "string": "string",
    "integer": "long",
    "float": "double",
    "boolean": "boolean",
    "timestamp": "timestamptz",
    "date": "date",
    "decimal": "decimal(38, 9)",
    "json": "string",
})

#: MySQL / MariaDB: timestamps as DATETIME(6) in UTC (the session's time_zone is '+00:00'); a
#: string primary-key column is VARCHAR(255) instead of LONGTEXT (an index needs a bounded length:
#: destinations/mysql/sql.py)
_MYSQL_TYPES = MappingProxyType({
    "string": "LONGTEXT",
    "integer": "BIGINT",
    "float": "DOUBLE",
    "boolean": "BOOLEAN",
    "timestamp": "DATETIME(6)",
    "date": "DATE",
    "decimal": "DECIMAL(38,9)",
    "json": "JSON",
})

_DUCKDB_TYPES = MappingProxyType({  # as duckdb_columns() names them (compared as they are)
    "string": "VARCHAR",
    "integer": "BIGINT",
    "float": "DOUBLE",
    "boolean": "BOOLEAN",
    "timestamp": "TIMESTAMP WITH TIME ZONE",
    "date": "DATE",
    "decimal": "DECIMAL(38,9)",
    "json": "JSON",
})

# -- the registries --------------------------------------------------------------------------


def _registry(*records: Vendor) -> Mapping[str, Vendor]:
    return MappingProxyType({record.name: record for record in records})


#: vendor -> its record, for every source the configuration can name
SOURCES: Mapping[str, Vendor] = _registry(
    Vendor("postgres", "source", "transfer_platform.sources.jdbc", "PostgresReader", "PostgresSource",
           drivers=("psycopg",), jdbc_jars=("/usr/share/java/postgresql.jar",),
           default_lookback_seconds=30, tenant_id_rule=_postgres_schema),
    Vendor("mysql", "source", "transfer_platform.sources.jdbc", "MysqlReader", "MysqlSource",
           drivers=("pymysql",), jdbc_jars=("/usr/share/java/mariadb-java-client.jar",),
           refuses=(Refusal("connection.schema", None,
                            "MySQL's schemas are its databases, and the source reads connection.database "
                            "(or the database a qualified source_table names)",
                            "remove schema and put the database in connection.database"),),
           default_lookback_seconds=5, tenant_container="database", tenant_id_rule=_mysql_database),
    Vendor("parquet", "source", "transfer_platform.sources.parquet_lake", "ParquetLakeReader", "ParquetSource",
           drivers=("pyarrow", "pyarrow.dataset"),
           refuses=(_one_query("source", "Spark reads the lake's files in parallel by itself (one task "
                                         "per file split), no query is split"),),
           default_lookback_seconds=300, tenant_container="folder", tenant_id_rule=_lake_folder),
)

#: vendor -> its record, for every destination the configuration can name
DESTINATIONS: Mapping[str, Vendor] = _registry(
    Vendor("postgres", "destination", "transfer_platform.destinations.postgres.writer", "PostgresWriter",
           "PostgresDestination", drivers=("psycopg", "pyarrow"), column_types=_POSTGRES_TYPES),
    Vendor("mysql", "destination", "transfer_platform.destinations.mysql.writer", "MysqlWriter",
           "MysqlDestination", drivers=("pymysql", "pyarrow", "pyarrow.csv"), column_types=_MYSQL_TYPES,
           refuses=(Refusal("connection.schema", None,
                            "MySQL's schemas are its databases: the destination writes connection.database",
                            "remove schema and put the recipient's database in connection.database"),)),
    Vendor("delta", "destination", "transfer_platform.destinations.delta", "DeltaWriter", "DeltaDestination",
           drivers=("deltalake", "pyarrow"),
           refuses=(_one_query("destination", "delta-rs writes each window as one MERGE commit from the "
                                              "driver, there are no queries to run in parallel"),)),
    Vendor("local", "destination", "transfer_platform.destinations.object_storage", "ObjectStorageWriter",
           "LocalStorageDestination", drivers=("pyarrow", "pyarrow.parquet", "cryptography"),
           only_adds_files=True),
    Vendor("s3", "destination", "transfer_platform.destinations.object_storage", "ObjectStorageWriter",
           "S3Destination", drivers=("pyarrow", "pyarrow.parquet", "cryptography", "boto3"),
           only_adds_files=True),
    Vendor("iceberg", "destination", "transfer_platform.destinations.iceberg.writer", "IcebergWriter",
           "IcebergDestination", drivers=("pyiceberg.catalog.sql", "pyarrow", "psycopg"),
           column_types=_ICEBERG_TYPES,
           refuses=(_one_query("destination", "pyiceberg writes each window as one snapshot from the "
                                              "driver, there are no queries to run in parallel"),)),
    Vendor("abs", "destination", "transfer_platform.destinations.object_storage", "ObjectStorageWriter",
           "AzureBlobDestination", drivers=("pyarrow", "pyarrow.parquet", "cryptography", "azure.storage.blob"),
           only_adds_files=True),
    Vendor("duckdb", "destination", "transfer_platform.destinations.duckdb.writer", "DuckdbWriter", "DuckdbDestination",
           drivers=("duckdb", "pyarrow"), column_types=_DUCKDB_TYPES,
           refuses=(_one_query("destination", "one process writes a DuckDB file, one transaction per "
                                              "window: there are no queries to run in parallel"),
                    Refusal("max_concurrent_transfers", 1,
                            "DuckDB lets one process open its file for writing: a second transfer at "
                            "once would wait for the first and then fail",
                            "remove max_concurrent_transfers from this destination (transfers of it "
                            "run one at a time)"))),
)


def supported(registry: Mapping[str, Vendor]) -> str:
    """The vendor names of a registry, for messages: ``postgres, mysql, parquet``."""
    return ", ".join(registry)


def implementation(registry: Mapping[str, Vendor], kind: str, configured, *args: object) -> object:
    """An instance of the class that implements ``configured.vendor`` (a source or destination),
    made from ``configured`` and ``args``."""
    if configured.vendor not in registry:
        from transfer_platform.errors import ConfigError

        raise ConfigError(f"{kind} {configured.name!r}: vendor {configured.vendor!r} is not supported "
                          f"(supported: {supported(registry)})")
    return registry[configured.vendor].implementation()(configured, *args)


def warm_modules() -> tuple[str, ...]:
    """Every vendor's module and drivers, each once: what a process that runs transfers may
    import ahead of them (``orchestration/run_worker.py``)."""
    names = [n for v in (*SOURCES.values(), *DESTINATIONS.values()) for n in (v.module, *v.drivers)]
    return tuple(dict.fromkeys(names))


def jdbc_jars() -> tuple[str, ...]:
    """The JDBC drivers of every source read over JDBC, each once."""
    return tuple(dict.fromkeys(jar for v in SOURCES.values() for jar in v.jdbc_jars))
