"""The destinations of the tests: one test destination of every vendor that
``transfer_platform.vendors.DESTINATIONS`` registers (some in two places: Delta on a folder and in
a bucket), and a reader of what each holds as its recipient reads it, independent of the writers:
PostgreSQL through psycopg, Delta through deltalake, object storage through its manifests' files
(applied in ``sequence``, a FULL_REFRESH one discarding what was held, the latest last-modified
version of each key kept, rows marked deleted dropped unless the model keeps them); a DuckDB file
also as another process reads it (the DuckDB tests: the rows, the watermark, any query).

A new destination vendor joins the contract suite (``transfer_platform_tests/contract/``) by a
factory here: ``FACTORIES[<variant>] = (<vendor>, <function>)``; the suite fails while a
registered vendor has none.
"""

from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.timeutil import utc
from transfer_platform.vendors import DESTINATIONS
from transfer_platform_tests.support.bigquery import bigquery
from transfer_platform_tests.support.events import MODEL, normalize
from transfer_platform_tests.support.gcs import gcs
from transfer_platform_tests.support.postgres import (
    destination_rows,
    pg_connection_config,
)
from transfer_platform_tests.support.snowflake import snowflake

#: the environment variable the object-storage destinations' ``signing_key`` names
SIGNING_KEY_ENV = "TP_TEST_SIGNING_KEY"
#: the environment variables their and the bucket Delta's key references name
KEY_ID_ENV, SECRET_ENV = "TP_TEST_DEST_KEY_ID", "TP_TEST_DEST_SECRET"
#: the environment variable the Azure destinations' ``account_key`` names
AZURE_KEY_ENV = "TP_TEST_AZURE_KEY"


@dataclass
class Place:
    """What a factory is given: a fresh PostgreSQL schema name (not created), a fresh folder,
    the session's S3 server and Azure emulator (each started on first use), and any other
    fixture by name (``place.fixture("snowflake_server")``: a vendor's emulator, session-scoped)."""

    schema: str
    folder: Path
    s3: Callable[[], Any]  # () -> S3Server
    azure: Callable[[], Any] | None = None  # () -> Azurite
    fixture: Callable[[str], Any] | None = None  # pytest's request.getfixturevalue


@dataclass
class TestDestination:
    """One destination of the tests: its configuration entry (without name and recipient) and
    how to read what it holds."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    variant: str  # the test's id: the vendor, or the vendor and where (``delta-s3``)
    vendor: str
    block: dict
    reader: Callable[[ModelConfig], list[dict] | None]
    details: dict = field(default_factory=dict)

    def entry(self, name: str, recipient: str) -> dict:
        return {"name": name, "recipient": recipient, **self.block}

    def rows(self, model: ModelConfig) -> list[dict] | None:
        """The model's rows as the recipient reads them (the model's destination columns, sorted
        by key, timestamps in UTC); None when the destination holds no table of it yet."""
        return self.reader(model)

    @property
    def sweeps_deletes(self) -> bool:
        """Whether the vendor can remove rows (object storage only adds files)."""
        return not DESTINATIONS[self.vendor].only_adds_files


def registered(*vendors: str) -> tuple[str, ...]:
    """``vendors``, each a registered destination vendor (a test's list cannot name another)."""
    unknown = [v for v in vendors if v not in DESTINATIONS]
    assert not unknown, f"not registered in transfer_platform/vendors/: {unknown}"
    return vendors


#: the object storage vendors (only adding files: their consumer keeps per key the latest version)
#: that integration/test_object_storage.py and test_manifest_consumer.py run over; ``gcs`` and
#: ``sftp`` have their own tests in destinations/
OBJECT_STORAGE = registered("local", "s3", "abs")
#: the vendors that hold one row per key (merged by key: rows can be replaced and removed)
ONE_ROW_PER_KEY = registered("postgres", "delta")
#: the vendors the per-vendor integration tests set up without the S3 server (a PostgreSQL
#: schema, a folder)
WITHOUT_S3 = registered("postgres", "delta", "local")


def _columns(model: ModelConfig) -> list[str]:
    return [c.destination_name for c in model.columns]


def _key(model: ModelConfig) -> Callable[[dict], tuple]:
    keys = [c.destination_name for c in model.columns if c.is_primary_key]
    return lambda row: tuple(row[k] for k in keys)


def _clean(rows: list[dict], model: ModelConfig) -> list[dict]:
    columns = _columns(model)
    out = [{c: (utc(v) if isinstance(v, datetime) else v) for c, v in ((c, row.get(c)) for c in columns)}
           for row in rows]
    return sorted(out, key=_key(model))


# -- PostgreSQL --------------------------------------------------------------------------------------


def postgres(place: Place) -> TestDestination:
    schema = place.schema

    def read(model: ModelConfig) -> list[dict] | None:
        from transfer_platform_tests.support.postgres import pg_connect

        with pg_connect(autocommit=True) as conn:
            if conn.execute("SELECT to_regclass(%s)", (f'"{schema}"."{model.model_name}"',)).fetchone()[0] is None:
                return None
            names = ", ".join(f'"{c}"' for c in _columns(model))
            cursor = conn.execute(f'SELECT {names} FROM "{schema}"."{model.model_name}"')
            fields = [d.name for d in cursor.description]
            return _clean([dict(zip(fields, r, strict=True)) for r in cursor.fetchall()], model)

    return TestDestination("postgres", "postgres", {"vendor": "postgres", "connection": pg_connection_config(schema)},
                           read, {"schema": schema})


# -- MySQL / MariaDB ---------------------------------------------------------------------------------


def mysql_database(name: str) -> str:
    """Create the MariaDB database ``name`` (a recipient's: the destination writes into it, it
    does not create it); it is dropped when the test process ends."""
    import atexit

    from transfer_platform_tests.support.mysql import mysql_connect, mysql_ident

    conn = mysql_connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {mysql_ident(name)} CHARACTER SET utf8mb4")
    conn.close()

    def drop() -> None:
        try:
            dropper = mysql_connect()
        except BaseException:  # noqa: BLE001 - the server went away: nothing to drop
            return
        with dropper.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {mysql_ident(name)}")
        dropper.close()

    atexit.register(drop)
    return name


def mysql_reader(database: str) -> Callable[[ModelConfig], list[dict] | None]:
    """The model's rows as a recipient reads them, through PyMySQL (not the writer): a boolean
    column (TINYINT(1)) as bool, DATETIME(6) values as UTC."""
    def read(model: ModelConfig) -> list[dict] | None:
        from transfer_platform_tests.support.mysql import mysql_connect, mysql_ident

        conn = mysql_connect(database)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                            "AND TABLE_NAME = %s", (database, model.model_name))
                if not cur.fetchone()[0]:
                    return None
                cur.execute(f"SELECT {', '.join(mysql_ident(c) for c in _columns(model))} "
                            f"FROM {mysql_ident(model.model_name)}")
                fields = [d[0] for d in cur.description]
                rows = [dict(zip(fields, r, strict=True)) for r in cur.fetchall()]
        finally:
            conn.close()
        booleans = [c.destination_name for c in model.columns if c.data_type == "boolean"]
        for row in rows:
            for name in booleans:
                row[name] = None if row[name] is None else bool(row[name])
        return _clean(rows, model)

    return read


def mysql(place: Place) -> TestDestination:
    from transfer_platform_tests.support.mysql import mysql_connection_config

    database = mysql_database(place.schema)
    return TestDestination("mysql", "mysql", {"vendor": "mysql", "connection": mysql_connection_config(database)},
                           mysql_reader(database), {"database": database})


# -- Delta Lake --------------------------------------------------------------------------------------


def _delta_reader(root: str, options: dict | None) -> Callable[[ModelConfig], list[dict] | None]:
    def read(model: ModelConfig) -> list[dict] | None:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            table = DeltaTable(f"{root}/{model.model_name}", storage_options=options)
        except TableNotFoundError:
            return None
        present = [c for c in _columns(model) if c in table.schema().to_arrow().names]
        return _clean(table.to_pyarrow_table(columns=present).to_pylist(), model)

    return read


def delta(place: Place) -> TestDestination:
    root = str(place.folder / "delta")
    return TestDestination("delta", "delta", {"vendor": "delta", "connection": {"path": root}},
                           _delta_reader(root, None), {"root": root})


def _bucket(place: Place, monkeypatch_env: dict[str, str]) -> tuple[Any, str]:
    server = place.s3()
    bucket = f"contract-{uuid.uuid4().hex[:12]}"
    server.create_bucket(bucket)
    monkeypatch_env.update({KEY_ID_ENV: server.access_key, SECRET_ENV: server.secret_key})
    return server, bucket


def delta_in_a_bucket(place: Place) -> TestDestination:
    env: dict[str, str] = {}
    server, bucket = _bucket(place, env)
    connection = {"bucket": bucket, "prefix": "recipient", "endpoint_url": server.endpoint, "path_style": True,
                  "access_key_id": f"${{{KEY_ID_ENV}}}", "secret_access_key": f"${{{SECRET_ENV}}}"}
    options = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": server.access_key, "AWS_SECRET_ACCESS_KEY": server.secret_key}
    return TestDestination("delta-s3", "delta", {"vendor": "delta", "connection": connection},
                           _delta_reader(f"s3://{bucket}/recipient", options), {"env": env})


# -- Apache Iceberg ----------------------------------------------------------------------------------


def iceberg_snapshot(schema: str, catalog: str, namespace: str, table: str, get: Callable[[str], bytes]) -> dict | None:
    """The table's current metadata (its JSON) as the SQL catalog in PostgreSQL points to it, read
    with psycopg and ``get`` (a file's bytes by its location); None when there is no such table."""
    from transfer_platform_tests.support.postgres import pg_connect

    with pg_connect(autocommit=True) as conn:
        if conn.execute("SELECT to_regclass(%s)", (f'"{schema}".iceberg_tables',)).fetchone()[0] is None:
            return None
        row = conn.execute(f'SELECT metadata_location FROM "{schema}".iceberg_tables WHERE catalog_name = %s '
                           "AND table_namespace = %s AND table_name = %s", (catalog, namespace, table)).fetchone()
    return None if row is None else json.loads(get(row[0]))


def iceberg_data_files(metadata: dict, io) -> list[str]:
    """The data files of the current snapshot, from its manifest list and manifests (pyiceberg's
    low-level Avro reading, nothing of the writer); a delete file fails (the writer makes none)."""
    from pyiceberg.manifest import ManifestContent, read_manifest_list

    current = metadata.get("current-snapshot-id")
    if current is None or current == -1:
        return []
    snapshot = next(s for s in metadata["snapshots"] if s["snapshot-id"] == current)
    files = []
    for manifest in read_manifest_list(io.new_input(snapshot["manifest-list"])):
        assert manifest.content == ManifestContent.DATA, "a delete manifest: rows would need deletes applied"
        files += [entry.data_file.file_path for entry in manifest.fetch_manifest_entry(io, discard_deleted=True)]
    return files


def _iceberg_reader(schema: str, catalog: str, namespace: str, get: Callable[[str], bytes],
                    io) -> Callable[[ModelConfig], list[dict] | None]:
    def read(model: ModelConfig) -> list[dict] | None:
        metadata = iceberg_snapshot(schema, catalog, namespace, model.model_name, get)
        if metadata is None:
            return None
        rows = []
        for path in iceberg_data_files(metadata, io):
            table = pq.read_table(io_bytes(get(path)))
            present = [c for c in _columns(model) if c in table.column_names]
            rows += table.select(present).to_pylist()
        return _clean(rows, model)

    return read


def io_bytes(data: bytes) -> io.BytesIO:
    return io.BytesIO(data)


def iceberg(place: Place) -> TestDestination:
    from pyiceberg.io.pyarrow import PyArrowFileIO

    catalog, namespace = f"contract_{uuid.uuid4().hex[:10]}", "acme"
    warehouse = place.folder / "warehouse"
    block = {"vendor": "iceberg", "connection": {"catalog": pg_connection_config(place.schema),
                                                  "catalog_name": catalog, "namespace": namespace,
                                                  "warehouse": {"path": str(warehouse)}}}
    get = lambda location: Path(location.removeprefix("file://")).read_bytes()  # noqa: E731
    return TestDestination("iceberg", "iceberg", block,
                           _iceberg_reader(place.schema, catalog, namespace, get, PyArrowFileIO()),
                           {"schema": place.schema, "catalog": catalog, "namespace": namespace,
                            "warehouse": warehouse})


def iceberg_in_a_bucket(place: Place) -> TestDestination:
    from pyiceberg.io.pyarrow import PyArrowFileIO

    env: dict[str, str] = {}
    server, bucket = _bucket(place, env)
    client = server.client()
    catalog, namespace = f"contract_{uuid.uuid4().hex[:10]}", "acme"
    warehouse = {"bucket": bucket, "prefix": "lake", "endpoint_url": server.endpoint, "path_style": True,
                 "access_key_id": f"${{{KEY_ID_ENV}}}", "secret_access_key": f"${{{SECRET_ENV}}}"}
    block = {"vendor": "iceberg", "connection": {"catalog": pg_connection_config(place.schema),
                                                  "catalog_name": catalog, "namespace": namespace,
                                                  "warehouse": warehouse}}

    def get(location: str) -> bytes:
        found_bucket, key = location.removeprefix("s3://").split("/", 1)
        return client.get_object(Bucket=found_bucket, Key=key)["Body"].read()

    file_io = PyArrowFileIO({"s3.endpoint": server.endpoint, "s3.access-key-id": server.access_key,
                             "s3.secret-access-key": server.secret_key, "s3.region": "us-east-1",
                             "s3.force-virtual-addressing": "false"})
    return TestDestination("iceberg-s3", "iceberg", block,
                           _iceberg_reader(place.schema, catalog, namespace, get, file_io),
                           {"env": env, "schema": place.schema, "catalog": catalog, "namespace": namespace,
                            "bucket": bucket, "server": server})


# -- object storage: Parquet files and manifests ----------------------------------------------------


def _consumed(model: ModelConfig, keys: Callable[[str], list[str]], get: Callable[[str], bytes],
              prefix: str) -> list[dict] | None:
    """What a consumer holds after applying the model's manifests (see the module's docstring)."""
    manifests = sorted((json.loads(get(k)) for k in keys(f"{prefix}/_manifests/{model.model_name}/")
                        if k.endswith(".json")), key=lambda m: m["sequence"])
    if not manifests:
        return None
    last_modified = model.last_modified.destination_name
    key = _key(model)
    latest: dict[tuple, dict] = {}
    for manifest in manifests:
        if manifest["transfer_type"] == "FULL_REFRESH":
            latest.clear()
        for entry in manifest["files"]:
            for row in pq.read_table(io.BytesIO(get(entry["data_file_key"]))).to_pylist():
                held = latest.get(key(row))
                if held is None or row[last_modified] >= held[last_modified]:
                    latest[key(row)] = row
    marker = model.deletion_marker
    rows = list(latest.values())
    if marker is not None and not model.keep_deleted_rows:
        name = marker.destination_name
        rows = [r for r in rows if not (r.get(name) is True or (marker.data_type != "boolean" and r.get(name) is not None))]
    return _clean(rows, model)


def local(place: Place) -> TestDestination:
    root, prefix = place.folder / "exports", "acme"

    def keys(start: str) -> list[str]:
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
                      and str(p.relative_to(root)).startswith(start))

    return TestDestination("local", "local", {"vendor": "local", "connection": {"path": str(root), "prefix": prefix},
                                              "signing_key": f"${{{SIGNING_KEY_ENV}}}"},
                           lambda model: _consumed(model, keys, lambda k: (root / k).read_bytes(), prefix),
                           {"root": root})


def s3(place: Place) -> TestDestination:
    env: dict[str, str] = {}
    server, bucket = _bucket(place, env)
    prefix = "acme"
    client = server.client()

    def keys(start: str) -> list[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=start)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def get(key: str) -> bytes:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()

    connection = {"bucket": bucket, "prefix": prefix, "endpoint_url": server.endpoint, "path_style": True,
                  "access_key_id": f"${{{KEY_ID_ENV}}}", "secret_access_key": f"${{{SECRET_ENV}}}"}
    return TestDestination("s3", "s3", {"vendor": "s3", "connection": connection,
                                        "signing_key": f"${{{SIGNING_KEY_ENV}}}"},
                           lambda model: _consumed(model, keys, get, prefix), {"env": env})


# -- Azure Blob Storage (Azurite): read with the SDK, not the writer's store -------------------------


def _container(place: Place, env: dict[str, str]) -> tuple[Any, str, dict]:
    server = place.azure()
    container = f"contract-{uuid.uuid4().hex[:12]}"
    server.create_container(container)
    env[AZURE_KEY_ENV] = server.key
    connection = {"account_name": server.account, "container": container, "endpoint_url": server.endpoint,
                  "account_key": f"${{{AZURE_KEY_ENV}}}"}
    return server, container, connection


def abs_(place: Place) -> TestDestination:
    env: dict[str, str] = {}
    server, container, connection = _container(place, env)
    prefix = "acme"
    client = server.container(container)

    def keys(start: str) -> list[str]:
        return sorted(b.name for b in client.list_blobs(name_starts_with=start))

    def get(key: str) -> bytes:
        return client.get_blob_client(key).download_blob().readall()

    return TestDestination("abs", "abs", {"vendor": "abs", "connection": {**connection, "prefix": prefix},
                                          "signing_key": f"${{{SIGNING_KEY_ENV}}}"},
                           lambda model: _consumed(model, keys, get, prefix), {"env": env})


def delta_in_a_container(place: Place) -> TestDestination:
    env: dict[str, str] = {}
    server, container, connection = _container(place, env)
    options = {"azure_storage_account_name": server.account, "azure_storage_account_key": server.key,
               "azure_storage_endpoint": server.endpoint, "allow_http": "true"}
    return TestDestination("delta-abs", "delta", {"vendor": "delta", "connection": {**connection, "prefix": "recipient"}},
                           _delta_reader(f"az://{container}/recipient", options), {"env": env})
# -- DuckDB: a database file -----------------------------------------------------------------------


def duckdb_rows(path: Path, table: str, columns: list[str], schema: str = "main") -> list[dict] | None:
    """A table of a DuckDB file as its recipient reads it: the file opened read-only with the
    duckdb package (closed at once), timestamps in UTC; None if the file or table is missing."""
    import duckdb

    if not path.exists():
        return None
    with duckdb.connect(str(path), read_only=True) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        found = conn.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = ?",
                             [schema, table]).fetchall()[0][0]
        if not found:
            return None
        present = [r[0] for r in conn.execute("SELECT column_name FROM duckdb_columns() WHERE schema_name = ? "
                                              "AND table_name = ?", [schema, table]).fetchall()]
        names = ", ".join(f'"{c}"' for c in columns if c in present)
        cursor = conn.execute(f'SELECT {names} FROM "{schema}"."{table}"')
        fields = [d[0] for d in cursor.description]
        return [dict(zip(fields, r, strict=True)) for r in cursor.fetchall()]


def duckdb_in_another_process(path: Path, sql: str) -> list[tuple]:
    """``sql``'s rows, read by a fresh Python process that opens the file read-only with the
    duckdb package; raises ``RuntimeError`` with DuckDB's message if it cannot."""
    code = textwrap.dedent("""
        import pickle, sys, duckdb
        try:
            with duckdb.connect(sys.argv[1], read_only=True) as conn:
                conn.execute("SET TimeZone = 'UTC'")
                conn.execute("SET enable_progress_bar = false")  # it writes to stdout on a slow query
                rows = conn.execute(sys.argv[2]).fetchall()
        except duckdb.Error as exc:
            rows = RuntimeError(str(exc))
        sys.stdout.buffer.write(pickle.dumps(rows))
    """)
    done = subprocess.run([sys.executable, "-c", code, str(path), sql], capture_output=True, check=True, timeout=120)
    rows = pickle.loads(done.stdout)
    if isinstance(rows, RuntimeError):
        raise rows
    return rows


def duckdb_delivered(path: Path) -> list:
    """The events model's rows in the DuckDB file (``main.events``), as another process reads
    them (:func:`duckdb_in_another_process`), normalized as ``events.source_rows`` gives them."""
    return normalize(duckdb_in_another_process(
        path, "SELECT id, organization_id, updated_at, payload FROM main.events"))


def duckdb_watermark(path: Path):
    """The events model's watermark in the DuckDB file's ``_transfer_status``, as another process
    reads it."""
    (row,) = duckdb_in_another_process(path, "SELECT transfer_last_updated_at FROM main._transfer_status "
                                             f"WHERE data_model_name = '{MODEL}'")
    return utc(row[0])


def duckdb(place: Place) -> TestDestination:
    path = place.folder / "acme.duckdb"

    def read(model: ModelConfig) -> list[dict] | None:
        rows = duckdb_rows(path, model.model_name, _columns(model))
        return None if rows is None else _clean(rows, model)

    return TestDestination("duckdb", "duckdb", {"vendor": "duckdb", "connection": {"path": str(path)}},
                           read, {"path": path})


def _sftp_factory(place: Place) -> TestDestination:
    from transfer_platform_tests.support.sftp import sftp

    return sftp(place)


def _clickhouse_factory(place: Place) -> TestDestination:
    from transfer_platform_tests.support.clickhouse import clickhouse

    return clickhouse(place)


#: variant -> (vendor, factory): every registered destination vendor has at least one
FACTORIES: dict[str, tuple[str, Callable[[Place], TestDestination]]] = {
    "postgres": ("postgres", postgres),
    "mysql": ("mysql", mysql),
    "delta": ("delta", delta),
    "delta-s3": ("delta", delta_in_a_bucket),
    "delta-abs": ("delta", delta_in_a_container),
    "local": ("local", local),
    "s3": ("s3", s3),
    "iceberg": ("iceberg", iceberg),
    "iceberg-s3": ("iceberg", iceberg_in_a_bucket),
    "abs": ("abs", abs_),
    "duckdb": ("duckdb", duckdb),
    "sftp": ("sftp", _sftp_factory),
    "clickhouse": ("clickhouse", _clickhouse_factory),
    "gcs": ("gcs", gcs),
    "snowflake": ("snowflake", snowflake),
    "bigquery": ("bigquery", bigquery),
}

#: the registered destination vendors (the product's registry)
DESTINATION_VENDORS: tuple[str, ...] = tuple(DESTINATIONS)


def variants(*, only_vendors: tuple[str, ...] | None = None) -> list:
    """The test destinations to parametrize over (``pytest.param``s named by variant): one or
    more of each registered vendor that has a factory (``only_vendors``: of those only)."""
    return [pytest.param(variant, id=variant) for variant, (vendor, _) in FACTORIES.items()
            if vendor in DESTINATION_VENDORS and (only_vendors is None or vendor in only_vendors)]


def missing_factories() -> list[str]:
    """Registered destination vendors without a test destination here."""
    covered = {vendor for vendor, _ in FACTORIES.values()}
    return [v for v in DESTINATION_VENDORS if v not in covered]


def make(variant: str, place: Place, monkeypatch: pytest.MonkeyPatch) -> TestDestination:
    """The test destination ``variant`` at ``place``, its environment references set."""
    from transfer_platform.destinations.manifests import new_signing_key

    destination = FACTORIES[variant][1](place)
    for name, value in destination.details.get("env", {}).items():
        monkeypatch.setenv(name, value)
    if "signing_key" in destination.block:
        monkeypatch.setenv(SIGNING_KEY_ENV, new_signing_key()[0])
    return destination


def events_rows(vendor: str, pg_conn, where) -> list:
    """The events model's rows (``normalize``d tuples) in a destination of ``vendor`` at ``where``
    (a PostgreSQL schema, or the folder of a Delta or ``local`` destination without a prefix):
    every row its files hold, for tests that count them (object storage: every version)."""
    if vendor == "postgres":
        return destination_rows(pg_conn, where)
    if vendor == "delta":
        from deltalake import DeltaTable

        table = DeltaTable(str(where / "events")).to_pyarrow_table()
    else:
        import pyarrow.dataset as pads

        table = pads.dataset(str(where / "events"), format="parquet").to_table()
    return normalize(zip(*(table.column(c).to_pylist() for c in ("id", "organization_id", "updated_at", "payload")),
                         strict=True))
