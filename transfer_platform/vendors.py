"""Which module implements each vendor: the one place a new source or destination is registered.

A vendor is a module with its reader or writer class (``sources/<vendor>.py``,
``destinations/<vendor>.py``) and a configuration class in ``config/models.py``; this registry
maps the ``vendor:`` value of the configuration file to the class, imported only when a transfer
first needs it (so that ``validate`` and the Dagster definitions load no driver). The vendor lists
in the configuration's checks and messages come from here.
"""

from __future__ import annotations

import importlib

#: vendor -> (module, class) of its SourceReader
SOURCES: dict[str, tuple[str, str]] = {
    "postgres": ("transfer_platform.sources.jdbc", "PostgresReader"),
    "mysql": ("transfer_platform.sources.jdbc", "MysqlReader"),
    "parquet": ("transfer_platform.sources.parquet_lake", "ParquetLakeReader"),
}

#: vendor -> (module, class) of its DestinationWriter
DESTINATIONS: dict[str, tuple[str, str]] = {
    "postgres": ("transfer_platform.destinations.postgres", "PostgresWriter"),
    "delta": ("transfer_platform.destinations.delta", "DeltaWriter"),
    "local": ("transfer_platform.destinations.object_storage", "ObjectStorageWriter"),
    "s3": ("transfer_platform.destinations.object_storage", "ObjectStorageWriter"),
}


def supported(registry: dict[str, tuple[str, str]]) -> str:
    return ", ".join(registry)


def implementation(registry: dict[str, tuple[str, str]], kind: str, configured) -> object:
    """An instance of the class that implements ``configured.vendor`` (a source or destination)."""
    if configured.vendor not in registry:
        from transfer_platform.errors import ConfigError

        raise ConfigError(f"{kind} {configured.name!r}: vendor {configured.vendor!r} is not supported "
                          f"(supported: {supported(registry)})")
    module, name = registry[configured.vendor]
    return getattr(importlib.import_module(module), name)(configured)
