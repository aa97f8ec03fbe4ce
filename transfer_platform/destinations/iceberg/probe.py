"""``test-connection`` of an Iceberg destination: the catalog's database reached and logged in to,
the catalog's tables and the namespace creatable (tried in a transaction rolled back), then the
warehouse written, read and cleaned (a folder or a bucket, as Delta's probe does)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from transfer_platform.core.sql import quote_ident
from transfer_platform.destinations.iceberg.catalog import schema_exists
from transfer_platform.errors import ConnectionFailure, TransferPlatformError

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.iceberg.writer import IcebergWriter
    from transfer_platform.probes import Check


def probe(writer: IcebergWriter, models: list[ModelConfig], target: str) -> list[Check]:
    from transfer_platform.probes import Probe

    probe = Probe(target)
    catalog = writer.catalog
    c = catalog.connection
    login = f"log in to the catalog's database {c.database!r} as {c.username!r}"
    namespace = (f"create the catalog's tables and namespace {writer.namespace!r} in schema "
                 f"{catalog.schema!r} (catalog {catalog.catalog_name!r})")
    warehouse = f"write, read and delete files in the warehouse {writer.root}"
    if not probe.reach(c.host, c.port):
        probe.skipped([login, namespace, warehouse], "the catalog's database cannot be reached")
        return probe.checks
    try:
        conn = catalog.conn
    except (ConnectionFailure, TransferPlatformError) as exc:
        probe.failed(login, getattr(exc, "reason", None) or str(exc),
                     "check connection.catalog's username, database and the password's environment variable")
        probe.skipped([namespace, warehouse], "cannot log in")
        return probe.checks
    probe.passed(login)
    _probe_catalog(conn, probe, namespace, catalog.schema, catalog.catalog_name, writer.namespace, c.username)
    _probe_warehouse(writer, probe, warehouse)
    return probe.checks


def _probe_catalog(conn, probe, name: str, schema: str, catalog_name: str, namespace: str, user: str) -> None:
    import psycopg

    quoted = quote_ident(schema)
    try:
        with conn.transaction(force_rollback=True):
            if not schema_exists(conn, schema):
                conn.execute(f"CREATE SCHEMA {quoted}")
            exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{quoted}.iceberg_namespace_properties",)
                                  ).fetchone()[0]
            if not exists:  # what SqlCatalog creates (the probe's copy is rolled back)
                conn.execute(f"CREATE TABLE {quoted}.iceberg_namespace_properties (catalog_name varchar(255), "
                             "namespace varchar(255), property_key varchar(255), property_value varchar(1000), "
                             "PRIMARY KEY (catalog_name, namespace, property_key))")
            conn.execute(f"INSERT INTO {quoted}.iceberg_namespace_properties VALUES (%s, %s, %s, 'probe') "
                         "ON CONFLICT DO NOTHING", (catalog_name, namespace, f"_tp_probe_{uuid.uuid4().hex[:8]}"))
    except psycopg.Error as exc:
        probe.failed(name, str(exc).strip().splitlines()[0],
                     f"GRANT USAGE, CREATE ON SCHEMA {quoted} TO {quote_ident(user)} (or CREATE ON DATABASE), "
                     f"and SELECT, INSERT, UPDATE, DELETE on the catalog's tables there")
        return
    probe.passed(name, "" if exists else "the catalog's tables do not exist yet; the first transfer creates them")


def _probe_warehouse(writer: IcebergWriter, probe, name: str) -> None:
    from transfer_platform.storage.folders import probe_folder
    from transfer_platform.storage.s3 import probe_objects

    if writer.s3 is not None:
        key = writer._key("_tp_probe_" + uuid.uuid4().hex[:12])
        probe_objects(probe, lambda: writer.s3.keys(writer._key() + "/"), writer.s3, key, writer.root)
        return
    with writer._probe_root(probe, name) as created:
        if created is not None:
            probe_folder(probe, Path(writer.root))


