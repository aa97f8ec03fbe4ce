"""The sources of the tests: a test source of every variant of every vendor that
``transfer_platform.vendors.SOURCES`` registers (the Parquet lake twice: in a folder and in a
bucket of the session's S3 server), in each tenancy a source can have. Each creates a table of
typed columns holding several tenants' rows as the provider's own tools would (psycopg, PyMySQL,
pyarrow and boto3: never through the reader under test), and is read as the least-privilege reader
``docs/permissions.md`` lists (PostgreSQL: ``USAGE`` on the schema and ``SELECT`` on the columns;
MySQL: ``SELECT`` on the columns; a bucket: ``s3:ListBucket`` and ``s3:GetObject``), whose read
right :meth:`TestSource.withhold_read` can take away again.

A new source vendor joins the conformance suite (``transfer_platform_tests/sources/``) by a factory
here: ``FACTORIES[<variant>] = (<vendor>, <function>)``; the suite fails while a registered vendor
has none.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transfer_platform.core.timeutil import utc
from transfer_platform.vendors import SOURCES
from transfer_platform_tests.support.mysql import (
    mysql_connect,
    mysql_connection_config,
    mysql_ident,
)
from transfer_platform_tests.support.postgres import pg_connect, pg_connection_config

TENANCIES = ("multi_tenant", "schema_tenanted")
#: a multi-tenant table's tenant column (the model's ``organization_column``)
ORGANIZATION_COLUMN = "organization_id"
#: the environment variables the test sources' secrets are read from
MYSQL_PASSWORD_ENV = "TP_TEST_SOURCE_PASSWORD"
KEY_ID_ENV, SECRET_ENV = "TP_TEST_SOURCE_KEY_ID", "TP_TEST_SOURCE_SECRET"

#: a table's rows by tenant id: each row a dict of source column name -> value
Rows = Mapping[str, list[dict[str, Any]]]


@dataclass
class Place:
    """What a factory is given: a token unique to the test (in the names of the schemas,
    databases, roles, buckets it makes), a fresh folder, the session's S3 server (started on
    first use), and the test's ``setenv`` and ``cleanup`` (run after the test, last first)."""

    token: str
    folder: Path
    s3: Callable[[], Any]  # () -> S3Server
    setenv: Callable[[str, str], None]
    cleanup: Callable[[Callable[[], None]], None]


@dataclass
class TestSource:
    """One source of the tests: its configuration entry (without a name), the source's own type
    of each model ``data_type``, how to create a table in it and how to take the reader's right
    to read that table away (``None``: the source has no rights to withhold, e.g. a folder read
    by the user the tests run as)."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    variant: str  # the vendor, or the vendor and where (``parquet-s3``)
    vendor: str
    tenancy: str
    block: dict
    native_types: Mapping[str, str]  # data_type -> the source's type of such a column
    creator: Callable[[str, dict[str, str], Rows], str]
    withholder: Callable[[str], None] | None = None
    #: what the fix of a read refused for a missing right names (a GRANT, the S3 action)
    refused_read_fix: str = ""
    token: str = ""  # the test's (see :class:`Place`): tenant ids naming schemas hold it

    @property
    def multi_tenant(self) -> bool:
        return self.tenancy == "multi_tenant"

    def entry(self, name: str) -> dict:
        return {"name": name, **self.block}

    def create(self, table: str, columns: Mapping[str, str], rows: Rows) -> str:
        """Create ``table`` with ``columns`` (source name -> model ``data_type``) holding
        ``rows``: multi-tenant, one table with ``ORGANIZATION_COLUMN`` added, every tenant's rows
        in it; schema-tenanted, one table in each tenant's schema (MySQL: database; lake: folder),
        created if missing (a tenant without rows gets an empty table). Returns the model's
        ``source_table``; the reader may read it."""
        return self.creator(table, dict(columns), rows)

    def withhold_read(self, table: str) -> None:
        """Take away the reader's right to read ``table`` (every tenant's), nothing else."""
        assert self.withholder is not None, f"{self.variant} has no read right to withhold"
        self.withholder(table)


# -- PostgreSQL --------------------------------------------------------------------------------------

POSTGRES_TYPES = {"string": "text", "integer": "bigint", "float": "double precision", "boolean": "boolean",
                  "timestamp": "timestamptz", "date": "date", "decimal": "numeric(38,9)", "json": "jsonb"}


def pg_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def postgres(place: Place, tenancy: str) -> TestSource:
    """The machine's PostgreSQL, read as a role holding only the grants docs/permissions.md lists;
    multi-tenant: a schema of the test's; schema-tenanted: a schema named by each tenant id."""
    role = f"tp_src_rd_{place.token}"
    home = f"tp_src_{place.token}"
    with pg_connect(autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {pg_ident(role)} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
        if tenancy == "multi_tenant":
            conn.execute(f"CREATE SCHEMA {pg_ident(home)}")
    schemas: list[str] = [home] if tenancy == "multi_tenant" else []
    granted: dict[str, list[tuple[str, list[str]]]] = {}  # table -> (schema, columns) granted

    def drop() -> None:
        with pg_connect(autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {pg_ident(schema)} CASCADE")
            conn.execute(f"DROP OWNED BY {pg_ident(role)} CASCADE")
            conn.execute(f"DROP ROLE {pg_ident(role)}")

    place.cleanup(drop)

    def make_table(conn, schema: str, table: str, columns: dict[str, str], rows: list[dict]) -> None:
        names = list(columns)
        conn.execute(f"CREATE TABLE {pg_ident(schema)}.{pg_ident(table)} ("
                     + ", ".join(f"{pg_ident(n)} {POSTGRES_TYPES[t]}" for n, t in columns.items()) + ")")
        if rows:
            values = ", ".join(f"%s::{POSTGRES_TYPES[t]}" for t in columns.values())
            with conn.cursor() as cur:
                where = f"{pg_ident(schema)}.{pg_ident(table)}".replace("%", "%%")  # not a placeholder
                cur.executemany(f"INSERT INTO {where} ({', '.join(pg_ident(n) for n in names)}) VALUES ({values})",
                                [tuple(r.get(n) for n in names) for r in rows])
        conn.execute(f"GRANT USAGE ON SCHEMA {pg_ident(schema)} TO {pg_ident(role)}")
        conn.execute(f"GRANT SELECT ({', '.join(pg_ident(n) for n in names)}) ON "
                     f"{pg_ident(schema)}.{pg_ident(table)} TO {pg_ident(role)}")
        granted.setdefault(table, []).append((schema, names))

    def create(table: str, columns: dict[str, str], rows: Rows) -> str:
        with pg_connect(autocommit=True) as conn:
            if tenancy == "multi_tenant":
                make_table(conn, home, table, {ORGANIZATION_COLUMN: "string", **columns},
                           [{ORGANIZATION_COLUMN: t, **r} for t, tenant_rows in rows.items() for r in tenant_rows])
                return f"{home}.{table}"
            for tenant, tenant_rows in rows.items():
                if tenant not in schemas:
                    conn.execute(f"CREATE SCHEMA {pg_ident(tenant)}")
                    schemas.append(tenant)
                make_table(conn, tenant, table, columns, tenant_rows)
        return table

    def withhold(table: str) -> None:
        with pg_connect(autocommit=True) as conn:
            for schema, names in granted[table]:
                conn.execute(f"REVOKE SELECT ({', '.join(pg_ident(n) for n in names)}) ON "
                             f"{pg_ident(schema)}.{pg_ident(table)} FROM {pg_ident(role)}")

    block = {"vendor": "postgres", "tenancy": tenancy,
             "connection": {**pg_connection_config(), "username": role}}
    return TestSource("postgres", "postgres", tenancy, block, POSTGRES_TYPES, create, withhold,
                      refused_read_fix="GRANT SELECT")


# -- MySQL / MariaDB ---------------------------------------------------------------------------------

MYSQL_TYPES = {"string": "VARCHAR(255)", "integer": "BIGINT", "float": "DOUBLE", "boolean": "BOOLEAN",
               "timestamp": "DATETIME(6)", "date": "DATE", "decimal": "DECIMAL(38,9)", "json": "JSON"}


def _mysql_value(value: object) -> object:
    """A value as the provider's application stores it: a timestamp as its UTC wall time in a
    ``DATETIME`` (the reader reads ``DATETIME`` as UTC)."""
    return utc(value).replace(tzinfo=None) if isinstance(value, datetime) else value


def mysql(place: Place, tenancy: str) -> TestSource:
    """The machine's MariaDB, read as a user holding only ``SELECT`` on the model's columns
    (docs/permissions.md), with a password. ``connection.database`` is a database of the test's:
    multi-tenant, it holds the table; schema-tenanted, a table of the same name that no tenant's
    read may return (the user may read it: a user logs in to a database it has a right in)."""
    home = f"tp_src_{place.token}"
    user, password = f"tp_src_rd_{place.token}", f"pw-{uuid.uuid4().hex}"
    account = f"'{user}'@'%'"
    databases = [home]
    with mysql_connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {mysql_ident(home)} CHARACTER SET utf8mb4")
        cur.execute(f"CREATE USER {account} IDENTIFIED BY '{password}'")

    def drop() -> None:
        with mysql_connect() as conn, conn.cursor() as cur:
            for database in databases:
                cur.execute(f"DROP DATABASE IF EXISTS {mysql_ident(database)}")
            cur.execute(f"DROP USER IF EXISTS {account}")

    place.cleanup(drop)
    place.setenv(MYSQL_PASSWORD_ENV, password)
    granted: dict[str, list[tuple[str, list[str]]]] = {}

    def make_table(cur, database: str, table: str, columns: dict[str, str], rows: list[dict]) -> None:
        names = list(columns)
        where = f"{mysql_ident(database)}.{mysql_ident(table)}"
        keys = f", KEY ({mysql_ident(ORGANIZATION_COLUMN)})" if ORGANIZATION_COLUMN in columns else ""
        cur.execute(f"CREATE TABLE {where} ("
                    + ", ".join(f"{mysql_ident(n)} {MYSQL_TYPES[t]} NULL" for n, t in columns.items())
                    + f"{keys}) CHARACTER SET utf8mb4")
        if rows:
            cur.executemany(f"INSERT INTO {where.replace('%', '%%')} ({', '.join(mysql_ident(n) for n in names)}) VALUES "
                            f"({', '.join(['%s'] * len(names))})",
                            [tuple(_mysql_value(r.get(n)) for n in names) for r in rows])
        cur.execute(f"GRANT SELECT ({', '.join(mysql_ident(n) for n in names)}) ON {where} TO {account}")
        granted.setdefault(table, []).append((database, names))

    def create(table: str, columns: dict[str, str], rows: Rows) -> str:
        with mysql_connect() as conn, conn.cursor() as cur:
            if tenancy == "multi_tenant":
                make_table(cur, home, table, {ORGANIZATION_COLUMN: "string", **columns},
                           [{ORGANIZATION_COLUMN: t, **r} for t, tenant_rows in rows.items() for r in tenant_rows])
                return table
            make_table(cur, home, table, columns, [{"payload": "the connection's own database"}])
            for tenant, tenant_rows in rows.items():
                if tenant not in databases:
                    cur.execute(f"CREATE DATABASE {mysql_ident(tenant)} CHARACTER SET utf8mb4")
                    databases.append(tenant)
                make_table(cur, tenant, table, columns, tenant_rows)
        return table

    def withhold(table: str) -> None:
        with mysql_connect() as conn, conn.cursor() as cur:
            for database, names in granted[table]:
                if tenancy == "schema_tenanted" and database == home:
                    continue  # the user keeps the right to log in to its database
                cur.execute(f"REVOKE SELECT ({', '.join(mysql_ident(n) for n in names)}) ON "
                            f"{mysql_ident(database)}.{mysql_ident(table)} FROM {account}")

    connection = {**mysql_connection_config(home), "username": user, "password": "${" + MYSQL_PASSWORD_ENV + "}"}
    return TestSource("mysql", "mysql", tenancy, {"vendor": "mysql", "tenancy": tenancy, "connection": connection},
                      MYSQL_TYPES, create, withhold, refused_read_fix="GRANT SELECT")


# -- the Parquet lake ----------------------------------------------------------------------------------

ARROW_TYPES = {"string": pa.string(), "integer": pa.int64(), "float": pa.float64(), "boolean": pa.bool_(),
               "timestamp": pa.timestamp("us", tz="UTC"), "date": pa.date32(),
               "decimal": pa.decimal128(38, 9), "json": pa.string()}


def parquet_bytes(columns: dict[str, str], rows: list[dict]) -> bytes:
    """``rows`` as one Parquet file, each column of its ``data_type``'s Arrow type."""
    schema = pa.schema([(n, ARROW_TYPES[t]) for n, t in columns.items()])
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist([{n: r.get(n) for n in columns} for r in rows], schema=schema), sink)
    return sink.getvalue().to_pybytes()


def _lake_files(tenancy: str, table: str, columns: dict[str, str], rows: Rows) -> dict[str, bytes]:
    """The lake's files (path under its root -> content): multi-tenant ``<table>/``, every
    tenant's rows; schema-tenanted ``<tenant id>/<table>/``, each tenant's own."""
    if tenancy == "multi_tenant":
        every = [{ORGANIZATION_COLUMN: t, **r} for t, tenant_rows in rows.items() for r in tenant_rows]
        return {f"{table}/part-0.parquet": parquet_bytes({ORGANIZATION_COLUMN: "string", **columns}, every)}
    return {f"{tenant}/{table}/part-0.parquet": parquet_bytes(columns, tenant_rows)
            for tenant, tenant_rows in rows.items()}


def parquet_folder(place: Place, tenancy: str) -> TestSource:
    """A lake in a folder. Its rights are the files' modes, which the user the tests run as
    (root, here) passes whatever they are: no right to withhold."""
    root = place.folder / "lake"
    root.mkdir(parents=True)

    def create(table: str, columns: dict[str, str], rows: Rows) -> str:
        for relative, content in _lake_files(tenancy, table, columns, rows).items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_bytes(content)
        return table

    return TestSource("parquet", "parquet", tenancy, {"vendor": "parquet", "tenancy": tenancy,
                                                      "connection": {"path": str(root)}},
                      {t: str(a) for t, a in ARROW_TYPES.items()}, create)


def parquet_s3(place: Place, tenancy: str) -> TestSource:
    """A lake in a bucket of the session's S3 server, read with the key of a user whose policy
    is docs/permissions.md's: ``s3:ListBucket`` on the bucket, ``s3:GetObject`` under the prefix."""
    server = place.s3()
    bucket, prefix, user = f"tp-src-{place.token}", "provider/lake", f"tp-src-rd-{place.token}"
    server.create_bucket(bucket)
    client, iam = server.client(), server.iam()
    iam.create_user(UserName=user)
    key = iam.create_access_key(UserName=user)["AccessKey"]
    place.setenv(KEY_ID_ENV, key["AccessKeyId"])
    place.setenv(SECRET_ENV, key["SecretAccessKey"])

    def policy(*, read: bool) -> None:
        statements = [{"Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{bucket}"}]
        if read:
            statements.append({"Effect": "Allow", "Action": "s3:GetObject",
                               "Resource": f"arn:aws:s3:::{bucket}/{prefix}/*"})
        iam.put_user_policy(UserName=user, PolicyName="lake", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": statements}))

    policy(read=True)

    def drop() -> None:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for found in page.get("Contents", []):
                client.delete_object(Bucket=bucket, Key=found["Key"])
        client.delete_bucket(Bucket=bucket)
        iam.delete_user_policy(UserName=user, PolicyName="lake")
        iam.delete_access_key(UserName=user, AccessKeyId=key["AccessKeyId"])
        iam.delete_user(UserName=user)

    place.cleanup(drop)

    def create(table: str, columns: dict[str, str], rows: Rows) -> str:
        for relative, content in _lake_files(tenancy, table, columns, rows).items():
            client.put_object(Bucket=bucket, Key=f"{prefix}/{relative}", Body=content)
        return table

    def withhold(table: str) -> None:  # the policy has no per-table statement: GetObject goes
        policy(read=False)

    connection = {"bucket": bucket, "prefix": prefix, "endpoint_url": server.endpoint, "path_style": True,
                  "access_key_id": "${" + KEY_ID_ENV + "}", "secret_access_key": "${" + SECRET_ENV + "}"}
    return TestSource("parquet-s3", "parquet", tenancy, {"vendor": "parquet", "tenancy": tenancy,
                                                         "connection": connection},
                      {t: str(a) for t, a in ARROW_TYPES.items()}, create, withhold,
                      refused_read_fix="s3:GetObject")


# -- the registry of test sources ------------------------------------------------------------------

FACTORIES: dict[str, tuple[str, Callable[[Place, str], TestSource]]] = {
    "postgres": ("postgres", postgres),
    "mysql": ("mysql", mysql),
    "parquet": ("parquet", parquet_folder),
    "parquet-s3": ("parquet", parquet_s3),
}

#: the registered source vendors (the product's registry)
SOURCE_VENDORS: tuple[str, ...] = tuple(SOURCES)


def variants(*, with_rights: bool = False, only: tuple[str, ...] | None = None) -> list:
    """The test sources to parametrize over: each variant of a registered vendor in each
    tenancy (``pytest.param((variant, tenancy))`` named ``<variant>-<tenancy>``);
    ``with_rights``: only those whose reader has a right :meth:`TestSource.withhold_read` can take
    away; ``only``: only these variants."""
    return [pytest.param((variant, tenancy), id=f"{variant}-{tenancy}")
            for variant, (vendor, _) in FACTORIES.items() if vendor in SOURCE_VENDORS
            and (not with_rights or variant in WITH_RIGHTS) and (only is None or variant in only)
            for tenancy in TENANCIES]


#: the variants whose reader's rights can be withheld (a folder read by root has none)
WITH_RIGHTS = ("postgres", "mysql", "parquet-s3")


def missing_factories() -> list[str]:
    """Registered source vendors without a test source here."""
    covered = {vendor for vendor, _ in FACTORIES.values()}
    return [v for v in SOURCE_VENDORS if v not in covered]


def make(variant: str, tenancy: str, place: Place) -> TestSource:
    """The test source ``variant`` in ``tenancy`` at ``place``."""
    source = FACTORIES[variant][1](place, tenancy)
    source.token = place.token
    return source


def new_place(request: pytest.FixtureRequest, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    """A :class:`Place` for the test of ``request``."""
    return Place(uuid.uuid4().hex[:10], folder, lambda: request.getfixturevalue("s3"), monkeypatch.setenv,
                 request.addfinalizer)

