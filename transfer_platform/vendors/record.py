"""A vendor's record: what the rest of the platform needs to know about one ``vendor:`` value of
the configuration file (see :mod:`transfer_platform.vendors`). Standard library only."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pydantic import BaseModel

#: the lookback of a source whose record does not name one (the reference system's, 5 minutes)
DEFAULT_LOOKBACK_SECONDS = 300


@dataclass(frozen=True)
class Extra:
    """An optional part of the install (``pyproject.toml``'s ``[project.optional-dependencies]``,
    dlt's and Airbyte's convention): ``pip install 'transfer-platform[<name>]'`` adds the client
    library ``package``, imported as ``module``. PostgreSQL, MySQL, DuckDB, Delta, Parquet and S3
    need none; a vendor whose client is missing is refused by ``validate`` with the install command
    as the fix, rather than by its first transfer with an ``ImportError``."""

    name: str
    package: str  # the distribution, as pip names it
    module: str  # what the vendor's code imports from it

    @property
    def install(self) -> str:
        return f"pip install 'transfer-platform[{self.name}]'"

    def installed(self) -> bool:
        """Whether ``module`` can be imported here: found, not imported (its parent packages are
        namespaces, imported by the search at no cost). Only a found one is remembered: a client
        installed while the process runs is found by the next check."""
        if self.module in _FOUND:
            return True
        try:
            found = importlib.util.find_spec(self.module) is not None
        except ImportError:  # a parent package is missing
            found = False
        if found:
            _FOUND.add(self.module)
        return found


_FOUND: set[str] = set()  # the modules of the extras found installed

SNOWFLAKE = Extra("snowflake", "snowflake-connector-python", "snowflake.connector")
BIGQUERY = Extra("bigquery", "google-cloud-bigquery", "google.cloud.bigquery")
CLICKHOUSE = Extra("clickhouse", "clickhouse-connect", "clickhouse_connect")
AZURE = Extra("azure", "azure-storage-blob", "azure.storage.blob")
GCS = Extra("gcs", "google-cloud-storage", "google.cloud.storage")
SFTP = Extra("sftp", "paramiko", "paramiko")
ICEBERG = Extra("iceberg", "pyiceberg", "pyiceberg")
#: every extra but ``all`` (which installs them all)
EXTRAS = (SNOWFLAKE, BIGQUERY, CLICKHOUSE, AZURE, GCS, SFTP, ICEBERG)


@dataclass(frozen=True)
class Refusal:
    """A setting that has no effect on a vendor: ``validate`` refuses any value but ``allowed``
    (the setting's default), saying ``has no effect on a <vendor> <kind>: <reason>``."""

    setting: str  # its path inside the entry, as the file writes it ("connection.schema")
    allowed: object
    reason: str
    fix: str


def one_query(kind: str, reason: str) -> Refusal:
    """The refusal of ``max_concurrent_queries_per_transfer`` by a vendor that runs no query in
    parallel (``kind``: source or destination)."""
    return Refusal("max_concurrent_queries_per_transfer", 1, reason,
                   f"remove max_concurrent_queries_per_transfer from this {kind}")


#: how a destination loads a window into an empty table, each row written once instead of staged
#: and merged (``Vendor.empty_table_load``; the SQL writer runs it, the vendor's writer gives its
#: steps): ``swap`` (the loaded staging table, its key built, becomes the table), ``create-and-rename``
#: (a new table of the table's definition, key included, replaces it by one rename),
#: ``clone-and-exchange`` (the rows into a clone of the table, exchanged with it), ``copy-into`` (the
#: rows copied into the table itself, inside the window's transaction)
EmptyTableLoad = Literal["swap", "create-and-rename", "clone-and-exchange", "copy-into"]

#: where a destination keeps each model's state (``Vendor.state_store``): ``status row`` (a row per
#: model of ``_transfer_status``, written in the window's transaction), ``table comment`` (the model
#: table's comment, swapped in with its rows), ``manifest`` (a state file beside the data files and
#: their signed manifests, written last: object storage's ``state.json``)
StateStore = Literal["status row", "table comment", "manifest"]

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
    config: type[BaseModel]  # its configuration class (the ``vendor:`` discriminator's choice)
    drivers: tuple[str, ...] = ()  # the Python modules of its client libraries (imported only at run time)
    jdbc_jars: tuple[str, ...] = ()  # the JDBC drivers Spark loads to read it (Debian's packages)
    refuses: tuple[Refusal, ...] = ()  # settings without effect on it
    extra: Extra | None = None  # the install's extra that brings its client (None: the base install's)
    #: its server's usual port: the one connected to when the connection names none, and the
    #: link form's hint when its port is required (None: no such port)
    default_port: int | None = None
    # -- a source's ---------------------------------------------------------------------------
    default_lookback_seconds: int = DEFAULT_LOOKBACK_SECONDS  # when lookback_window is not set
    tenant_container: str = "schema"  # what a schema-tenanted source's tenant id names
    tenant_id_rule: TenantIdRule | None = None  # the limits on such a name, beyond "no NUL"
    # -- a destination's ------------------------------------------------------------------------
    column_types: Mapping[str, str] = field(default_factory=dict)  # a model's data_type -> its type name
    only_adds_files: bool = False  # rows gone from the source cannot be deleted (no delete sweep)
    empty_table_load: EmptyTableLoad | None = None  # None: a window into an empty table is merged too
    state_store: StateStore | None = None  # None: the table format's own (Delta's commits, Iceberg's properties)

    def implementation(self) -> type:
        """The class that implements this vendor (importing its module, drivers and all)."""
        return getattr(importlib.import_module(self.module), self.class_name)

    def tenant_id_problem(self, tenant_id: str, *, uses_source_query: bool) -> str | None:
        """Why ``tenant_id`` cannot name a tenant's schema (MySQL: database; Parquet: folder) in
        a schema-tenanted source of this vendor, or ``None`` if it can."""
        if "\x00" in tenant_id:
            return "it contains a NUL character"
        return self.tenant_id_rule(tenant_id, uses_source_query) if self.tenant_id_rule else None
