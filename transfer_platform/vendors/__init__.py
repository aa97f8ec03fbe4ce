"""Every vendor, one record each, beside its configuration: the one place a new source or
destination is registered.

A vendor's module here (``postgres.py``, ``mysql.py``, ``parquet.py``, ``delta.py``,
``iceberg.py``, ``object_storage.py``, ``duckdb.py``, ``clickhouse.py``, ``snowflake.py``,
``bigquery.py``) holds its configuration classes (what a
``vendor:`` entry of the configuration file may hold) and its :class:`Vendor` records, which say
what the rest of the platform needs to know about that ``vendor:`` value: the module and class
that implement it (``sources/<vendor>.py``, ``destinations/<vendor>.py``, imported only when a
transfer first needs it, so that ``validate`` and the Dagster definitions load no driver), its
configuration class, the drivers it needs, the settings it has no use for (``validate`` refuses
them), and its own facts: a source's default lookback and what its tenant ids can be, a
destination's type names and whether it can delete rows. The registries below list the records;
the configuration's ``vendor:`` choices (``config/models.py``), its checks, the core types and
the run worker read them; nothing else switches on a vendor's name, and the vendor lists of the
messages come from here.

Importing this package imports the standard library and pydantic only: no driver, no Spark, no
Dagster.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from transfer_platform.vendors import (
    bigquery,
    clickhouse,
    delta,
    duckdb,
    iceberg,
    mysql,
    object_storage,
    parquet,
    postgres,
    snowflake,
)
from transfer_platform.vendors.record import Refusal, Vendor

__all__ = ["DESTINATIONS", "SOURCES", "Refusal", "Vendor", "implementation", "jdbc_jars", "supported",
           "warm_modules"]


def _registry(*records: Vendor) -> Mapping[str, Vendor]:
    return MappingProxyType({record.name: record for record in records})


#: vendor -> its record, for every source the configuration can name
SOURCES: Mapping[str, Vendor] = _registry(postgres.SOURCE, mysql.SOURCE, parquet.SOURCE)

#: vendor -> its record, for every destination the configuration can name
DESTINATIONS: Mapping[str, Vendor] = _registry(
    postgres.DESTINATION, mysql.DESTINATION, delta.DESTINATION, object_storage.LOCAL, object_storage.S3,
    object_storage.ABS, object_storage.GCS, iceberg.DESTINATION, duckdb.DESTINATION, object_storage.SFTP,
    clickhouse.DESTINATION, snowflake.DESTINATION, bigquery.DESTINATION)


for _record in (*SOURCES.values(), *DESTINATIONS.values()):
    _record.config.RECORD = _record  # what a configured entry's ``vendor_record`` answers


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
    import ahead of them (``orchestration/speed/run_worker.py``)."""
    names = [n for v in (*SOURCES.values(), *DESTINATIONS.values()) for n in (v.module, *v.drivers)]
    return tuple(dict.fromkeys(names))


def jdbc_jars() -> tuple[str, ...]:
    """The JDBC drivers of every source read over JDBC, each once."""
    return tuple(dict.fromkeys(jar for v in SOURCES.values() for jar in v.jdbc_jars))
