"""The per-vendor harnesses of the crash-safety and empty-table-load contracts
(``contract/test_crash_safety_contract.py``, ``contract/test_empty_table_load_contract.py``).

Each contract takes its vendors from the registry by what they declare (a ``state_store``: a
window's rows and state committed together; an ``empty_table_load``) and finds here, by vendor,
what only the vendor knows: which test destination of :mod:`support.destinations` to use (its
configuration entry, its reader through the vendor's own client), how to see a window being
written from outside (to SIGKILL the transfer then), what a dead transfer leaves behind, and at
which driver call a writer is stopped in the middle of an empty-table load. A vendor that declares
the capability and has no harness here fails its contract.

Nothing here names a private method of a writer: the moment to kill is seen from outside (a
staging table, a file, a clone's metadata) or is a call of the vendor's client library (the
driver's ``execute`` of a statement), so the writers may be rewritten freely.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.destinations.base import writer_for
from transfer_platform_tests.support import destinations
from transfer_platform_tests.support.cli import PACKAGE_ROOT
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.destinations import Place, TestDestination
from transfer_platform_tests.support.events import MODEL
from transfer_platform_tests.support.processes import group_alive

STAGING = "_tp_stg_"  # the prefix of every table a transfer makes for itself (docs/destinations.md)
KILL_TIMEOUT_SECONDS = 600  # a failure bound (a JVM starts slowly on a loaded machine), not a wait


# -- running a transfer or a writer in a process of its own ------------------------------------------


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
    env.pop("DAGSTER_HOME", None)  # no reporting to a Dagster instance
    return env


def run_python(script: str, *args: str, cwd: Path) -> None:
    """``script`` in a fresh Python (given ``args``); fails with its output unless it exits 0."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=KILL_TIMEOUT_SECONDS)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


#: a transfer at a given moment in a process of its own (a chDB folder is open in one process at a
#: time): Spark only if a window needs it
TRANSFER_SCRIPT = """
import sys
from datetime import datetime
from transfer_platform.config.loading import load_config
from transfer_platform.runtime.spark_session import LazySession, get_spark_session
from transfer_platform_tests.support.transfers import transfer

config = load_config(sys.argv[1])
summary = transfer(LazySession(lambda: get_spark_session(config.spark)), config, datetime.fromisoformat(sys.argv[2]),
                   sys.argv[3])
assert summary.status == "SUCCESS", summary.error
"""


def killed_when_marked(folder: Path, script: str, *args: str) -> str:
    """Run the Python ``script`` (given ``args`` and then the path of a marker file) as its own
    process group; SIGKILL it once it has written the marker (it then waits forever); returns the
    marker's text."""
    marker = folder / "marker"
    with open(folder / "out", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args, str(marker)], env=_env(),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        launched = time.monotonic()
        while not marker.exists():
            assert proc.poll() is None, (folder / "out").read_text()[-3000:]
            assert time.monotonic() - launched < KILL_TIMEOUT_SECONDS, "the moment to kill it never came"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    return marker.read_text()


@dataclass(frozen=True)
class Pause:
    """Where a writer is stopped (its process then waits to be killed): at the first call of the
    client library's ``cls.method`` (every subclass's too) whose statement matches ``pattern``,
    before the call or ``after`` it."""

    module: str
    cls: str
    method: str
    pattern: str
    after: bool = False


def pause_at(pause: Pause, marker: Path) -> None:
    """Install ``pause`` in this process: write the statement into ``marker``, then wait forever."""
    base = getattr(importlib.import_module(pause.module), pause.cls)

    def family(cls: type) -> list[type]:
        return [cls, *(c for sub in cls.__subclasses__() for c in family(sub))]

    def stop(statement: str) -> None:
        marker.write_text(statement)
        while True:
            time.sleep(1)

    def wrapped(original: Callable) -> Callable:
        def paused(self, *args, **kwargs):
            statement = str(args[0]) if args else ""
            hit = re.search(pause.pattern, statement) is not None
            if hit and not pause.after:
                stop(statement)
            result = original(self, *args, **kwargs)
            if hit:
                stop(statement)
            return result

        return paused

    overriding = {c for c in family(base)[1:] if pause.method in vars(c)}
    setattr(base, pause.method, wrapped(getattr(base, pause.method)))  # defined there or inherited
    for cls in overriding:
        setattr(cls, pause.method, wrapped(vars(cls)[pause.method]))


# -- reading a destination ---------------------------------------------------------------------------


def committed_watermark(config: PlatformConfig) -> datetime | None:
    """The model's committed watermark, as the next transfer would find it (read without side
    effects: ``committed_state``)."""
    writer = writer_for(config.destination(DESTINATION))
    try:
        return writer.committed_state(config.model(MODEL)).state.watermark
    finally:
        writer.close()


def _pg_tables(schema: str) -> dict[str, int]:
    from transfer_platform_tests.support.postgres import pg_connect

    with pg_connect(autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s AND "
                                            "starts_with(tablename, %s)", (schema, STAGING)).fetchall()]
        counts = {}
        for name in names:
            try:
                counts[name] = conn.execute(f'SELECT count(*) FROM "{schema}"."{name}"').fetchone()[0]
            except Exception:  # noqa: BLE001 - dropped meanwhile
                continue
        return counts


def _mysql_tables(database: str) -> dict[str, int]:
    from transfer_platform_tests.support.mysql import mysql_connect, mysql_ident

    conn = mysql_connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME LIKE %s", (database, STAGING.replace("_", "\\_") + "%"))
            counts = {}
            for (name,) in cur.fetchall():
                try:
                    cur.execute(f"SELECT count(*) FROM {mysql_ident(name)}")
                    counts[name] = cur.fetchone()[0]
                except Exception:  # noqa: BLE001 - dropped meanwhile
                    continue
            return counts
    finally:
        conn.close()


def staged_rows(destination: TestDestination) -> dict[str, int]:
    """The transfers' own tables of a PostgreSQL or MySQL destination, and the rows each holds."""
    if destination.vendor == "postgres":
        return _pg_tables(destination.details["schema"])
    return _mysql_tables(destination.details["database"])


def _unnamed_files(destination: TestDestination, model: str = MODEL) -> list[str]:
    """The model's data files of an object-storage destination that no manifest names (a dead
    transfer's, or one being written)."""
    keys, get, prefix = destination.details["keys"], destination.details["get"], destination.details["prefix"]
    named = {entry["data_file_key"] for key in keys(f"{prefix}/_manifests/{model}/") if key.endswith(".json")
             for entry in json.loads(get(key))["files"]}
    return [k for k in keys(f"{prefix}/{model}/") if k not in named]


def with_files(make: Callable[[Place], TestDestination], lister: Callable[[Place, TestDestination], tuple]):
    """The test destination of ``make``, its details given ``keys`` and ``get`` (a listing and a
    read of its objects through the vendor's own client) and ``prefix``."""
    def made(place: Place) -> TestDestination:
        destination = make(place)
        keys, get = lister(place, destination)
        destination.details.update(keys=keys, get=get, prefix=destination.block["connection"].get("prefix", "acme"))
        return destination

    return made


def _local_files(place: Place, destination: TestDestination) -> tuple:
    root = Path(destination.details["root"])
    return (lambda start: sorted(str(p.relative_to(root)) for p in root.rglob("*")
                                 if p.is_file() and str(p.relative_to(root)).startswith(start)),
            lambda key: (root / key).read_bytes())


def _s3_files(place: Place, destination: TestDestination) -> tuple:
    client, bucket = place.s3().client(), destination.block["connection"]["bucket"]

    def keys(start: str) -> list[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=start)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    return keys, lambda key: client.get_object(Bucket=bucket, Key=key)["Body"].read()


def _abs_files(place: Place, destination: TestDestination) -> tuple:
    assert place.azure is not None
    client = place.azure().container(destination.block["connection"]["container"])
    return (lambda start: sorted(b.name for b in client.list_blobs(name_starts_with=start)),
            lambda key: client.get_blob_client(key).download_blob().readall())


def _gcs_files(place: Place, destination: TestDestination) -> tuple:
    client, bucket = destination.details["server"].client(), destination.details["bucket"]
    return (lambda start: sorted(b.name for b in client.list_blobs(bucket, prefix=start)),
            lambda key: client.bucket(bucket).blob(key).download_as_bytes())


def _sftp_parts(destination: TestDestination) -> list[Path]:
    """The files being written (dot-names) under the model's folder of an SFTP destination."""
    server, root = destination.details["server"], destination.details["root"]
    data = server.chroot / root.lstrip("/") / "acme" / MODEL
    return list(data.rglob(".*.tmp"))


def _bigquery_staging(destination: TestDestination) -> list[str]:
    server, dataset = destination.details["server"], destination.details["dataset"]
    client = server.client()
    try:
        return [t.table_id for t in client.list_tables(f"{server.project}.{dataset}") if t.table_id.startswith(STAGING)]
    finally:
        client.close()


def _snowflake_staging(destination: TestDestination) -> list[str]:
    from transfer_platform_tests.support.snowflake import staging_tables

    d = destination.details
    return staging_tables(d["server"], d["database"], d["schema"])


def _snowflake_watching(destination: TestDestination) -> Callable[[], bool]:
    """Staging tables seen through one session kept open (a login per poll could miss them)."""
    from transfer_platform_tests.support.snowflake import staging_tables

    d = destination.details
    conn = d["server"].connect()
    d.setdefault("closing", []).append(conn.close)
    return lambda: bool(staging_tables(d["server"], d["database"], d["schema"], conn))


def _duckdb_staged(destination: TestDestination) -> list[Path]:
    """The Parquet files a DuckDB destination stages a window in, beside its database file."""
    return list((Path(str(destination.details["path"]) + ".tp") / "staging" / MODEL).rglob("*.parquet"))


# -- ClickHouse: a chDB folder of its own, every transfer and read in a process of its own ----------

CHDB_DATABASE = "acme_ch"


def clickhouse_alone(place: Place) -> TestDestination:
    """A chDB folder of the test's own (not the session's, which this process holds open), read
    by another process as a recipient opening it after the writer's process ended."""
    from transfer_platform_tests.support.clickhouse import chdb_in_another_process, q
    from transfer_platform_tests.support.destinations import _clean, _columns

    folder = place.folder / "chdb"

    def read(model: ModelConfig) -> list[dict] | None:
        names = _columns(model)
        found = chdb_in_another_process(folder, f"SELECT count() FROM system.tables WHERE database = "
                                                f"'{CHDB_DATABASE}' AND name = '{model.model_name}'")
        if not found[0][0]:
            return None
        rows = chdb_in_another_process(folder, f"SELECT {', '.join(q(c) for c in names)} FROM "
                                               f"{q(CHDB_DATABASE)}.{q(model.model_name)} FINAL")
        return _clean([dict(zip(names, r, strict=True)) for r in rows], model)

    return TestDestination("clickhouse-alone", "clickhouse",
                           {"vendor": "clickhouse", "connection": {"path": str(folder), "database": CHDB_DATABASE}},
                           read, {"path": folder, "database": CHDB_DATABASE})


def _chdb_watermark(destination: TestDestination, config: PlatformConfig) -> datetime | None:
    from transfer_platform_tests.support.clickhouse import chdb_in_another_process

    rows = chdb_in_another_process(destination.details["path"], "SELECT transfer_last_updated_at FROM "
                                   f"{CHDB_DATABASE}._transfer_status WHERE data_model_name = '{MODEL}'")
    if not rows or rows[0][0] is None:
        return None
    return rows[0][0].replace(tzinfo=UTC) if rows[0][0].tzinfo is None else rows[0][0]


def _chdb_own_tables(destination: TestDestination) -> list[str]:
    from transfer_platform_tests.support.clickhouse import chdb_in_another_process

    path = destination.details["path"]
    if not path.exists():
        return []
    return [r[0] for r in chdb_in_another_process(
        path, f"SELECT name FROM system.tables WHERE database = '{CHDB_DATABASE}' AND startsWith(name, '{STAGING}')")]


def _chdb_committing(destination: TestDestination) -> bool:
    """A window's clone of the table exists (``_tp_stg_<model>_<transfer>_swap``: its commit under
    way), seen in the folder's metadata without opening it."""
    metadata = destination.details["path"] / "metadata" / CHDB_DATABASE
    return metadata.is_dir() and any(n.startswith(STAGING) and n.endswith("_swap.sql") for n in os.listdir(metadata))


# -- the crash-safety harnesses -----------------------------------------------------------------------


def _default_watermark(destination: TestDestination, config: PlatformConfig) -> datetime | None:
    return committed_watermark(config)


@dataclass(frozen=True)
class CrashHarness:
    """How the crash contract kills a transfer into one vendor while it writes a window (the
    command line in its own process group, its JVM a child) and reads what it left."""

    make: Callable[[Place], TestDestination]  # the destination (a factory of support.destinations)
    batch: int  # rows of the killed window: a load long enough to catch
    in_flight: Callable[[TestDestination], Callable[[], bool]]  # () -> the window is being written: kill now
    leftovers: Callable[[TestDestination], list]  # what a dead transfer leaves (the next one removes it)
    poll: float = 0.02
    daily_windows: bool = False  # the killed transfer moves daily windows (else the batch is one window)
    settings: dict = field(default_factory=dict)  # more of the destination's entry
    own_process: bool = False  # every transfer and read in another process (chDB: one process a folder)
    attempts: int = 1  # tries, each into a new destination, until a kill lands mid-window
    wide_rows: bool = False  # ~1 kB rows: a file long enough to upload to be seen being written
    watermark: Callable[[TestDestination, PlatformConfig], datetime | None] = _default_watermark


def _staging_with_rows(destination: TestDestination) -> Callable[[], bool]:
    return lambda: any(n > 0 for n in staged_rows(destination).values())


CRASH: dict[str, CrashHarness] = {
    "postgres": CrashHarness(destinations.postgres, 300_000, _staging_with_rows, lambda d: list(staged_rows(d))),
    "mysql": CrashHarness(destinations.mysql, 100_000, _staging_with_rows, lambda d: list(staged_rows(d))),
    "duckdb": CrashHarness(destinations.duckdb, 300_000, lambda d: lambda: bool(_duckdb_staged(d)), _duckdb_staged),
    "bigquery": CrashHarness(destinations.bigquery, 2_000, lambda d: lambda: bool(_bigquery_staging(d)),
                             _bigquery_staging, poll=0.05),
    "snowflake": CrashHarness(destinations.snowflake, 20_000, _snowflake_watching, _snowflake_staging, poll=0.01,
                              settings={"lock_lease_seconds": 3}),  # the dead transfer's hold: taken over after it
    "clickhouse": CrashHarness(clickhouse_alone, 40_000, lambda d: lambda: _chdb_committing(d), _chdb_own_tables,
                               poll=0, daily_windows=True, own_process=True, attempts=5, watermark=_chdb_watermark),
    "local": CrashHarness(with_files(destinations.local, _local_files), 60_000,
                          lambda d: lambda: bool(_unnamed_files(d)), _unnamed_files),
    "s3": CrashHarness(with_files(destinations.s3, _s3_files), 60_000,
                       lambda d: lambda: bool(_unnamed_files(d)), _unnamed_files),
    "abs": CrashHarness(with_files(destinations.abs_, _abs_files), 60_000,
                        lambda d: lambda: bool(_unnamed_files(d)), _unnamed_files),
    "gcs": CrashHarness(with_files(destinations.FACTORIES["gcs"][1], _gcs_files), 60_000,
                        lambda d: lambda: bool(_unnamed_files(d)), _unnamed_files),
    "sftp": CrashHarness(destinations.FACTORIES["sftp"][1], 60_000,
                         lambda d: lambda: bool([p for p in _sftp_parts(d) if p.name.startswith(".part-")]),
                         _sftp_parts, poll=0.01, wide_rows=True),
}


# -- the empty-table-load harnesses ----------------------------------------------------------------


def _pg_oid(destination: TestDestination, table: str) -> object:
    from transfer_platform_tests.support.postgres import pg_connect

    with pg_connect(autocommit=True) as conn:
        return conn.execute("SELECT to_regclass(%s)::oid", (f'"{destination.details["schema"]}"."{table}"',)).fetchone()[0]


def _no_identity(destination: TestDestination, table: str) -> object:
    return None


def _pg_duplicate(destination: TestDestination) -> None:
    from transfer_platform_tests.support.postgres import pg_connect

    table = f'"{destination.details["schema"]}"."{MODEL}"'
    with pg_connect(autocommit=True) as conn:
        conn.execute(f"INSERT INTO {table} SELECT * FROM {table} LIMIT 1")


def _mysql_duplicate(destination: TestDestination) -> None:
    from transfer_platform_tests.support.mysql import mysql_connect, mysql_ident

    conn = mysql_connect(destination.details["database"])
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {mysql_ident(MODEL)} SELECT * FROM {mysql_ident(MODEL)} LIMIT 1")
        conn.commit()
    finally:
        conn.close()


def _chdb_session_tables(destination: TestDestination) -> list[str]:
    client = destination.details["server"].client()
    database = destination.details["database"]
    return sorted(r[0] for r in client.query(f"SELECT name FROM system.tables WHERE database = '{database}' "
                                             f"AND startsWith(name, '{STAGING}')").result_rows)


def clickhouse_in_session(place: Place) -> TestDestination:
    """The contract's ClickHouse destination (a database of the session's chDB folder), its
    folder's client in its details."""
    destination = destinations.FACTORIES["clickhouse"][1](place)
    assert place.fixture is not None
    destination.details["server"] = place.fixture("clickhouse_server")
    return destination


@dataclass(frozen=True)
class EmptyLoadHarness:
    """How the empty-table-load contract tells the load was taken, what a transfer leaves behind,
    and where it stops a writer in the middle of the load to kill it."""

    make: Callable[[Place], TestDestination]  # the destination, written through a writer in this process
    took: Callable[[dict, bool], bool]  # (the window's ``stage`` record, whether the table was replaced)
    leftovers: Callable[[TestDestination], list]  # the transfers' own tables left
    pause: Pause  # the moment a writer is killed: its rows loaded, the window not committed
    table_id: Callable[[TestDestination, str], object] = _no_identity  # a table's identity: a replaced one's changes
    #: a row of the table inserted again by the recipient: refused by the server's key (None: keys are not enforced)
    insert_duplicate: Callable[[TestDestination], None] | None = None
    alone: Callable[[Place], TestDestination] | None = None  # for the kill: written by other processes only
    alone_leftovers: Callable[[TestDestination], list] | None = None
    alone_watermark: Callable[[TestDestination, PlatformConfig], datetime | None] = _default_watermark
    settings: dict = field(default_factory=dict)  # more of the destination's entry
    #: more windows each refused by name: (column, a value, the message)
    refusals: tuple[tuple[str, Any, str], ...] = ()


def _marked(name: str) -> Callable[[dict, bool], bool]:
    return lambda record, replaced: bool(record.get(name))


EMPTY_TABLE_LOADS: dict[str, EmptyLoadHarness] = {
    # swap: the keyed staging table becomes the table (a new table: a new OID), in the window's transaction
    "postgres": EmptyLoadHarness(destinations.postgres, lambda record, replaced: replaced,
                                 lambda d: list(staged_rows(d)), Pause("psycopg", "Connection", "execute", "RENAME TO"),
                                 table_id=_pg_oid, insert_duplicate=_pg_duplicate),
    # create-and-rename: LOAD DATA into a new keyed table, which replaces the table
    "mysql": EmptyLoadHarness(destinations.mysql, _marked("fresh_table"), lambda d: list(staged_rows(d)),
                              Pause("pymysql.cursors", "Cursor", "execute", "LOAD DATA", after=True),
                              insert_duplicate=_mysql_duplicate),
    # clone-and-exchange: the rows into a clone of the table, exchanged with it
    "clickhouse": EmptyLoadHarness(clickhouse_in_session, _marked("straight_into_target"), _chdb_session_tables,
                                   Pause("clickhouse_connect.driver.client", "Client", "command", "EXCHANGE TABLES"),
                                   alone=clickhouse_alone, alone_leftovers=_chdb_own_tables,
                                   alone_watermark=_chdb_watermark,
                                   refusals=(("born", "1850-01-01",
                                              "column 'born' holds 1850-01-01, outside 1900-01-01 to 2299-12-31"),)),
    # copy-into: the rows copied into the table itself, inside the window's transaction
    "snowflake": EmptyLoadHarness(destinations.snowflake, _marked("straight_into_target"), _snowflake_staging,
                                  # after its COPY INTO, its transaction open (the emulator never ends a dead
                                  # session's transaction: a pause at its COMMIT would hold the lock row forever)
                                  Pause("snowflake.connector.cursor", "SnowflakeCursor", "execute", "COPY INTO",
                                        after=True),
                                  settings={"lock_lease_seconds": 2}),  # the killed one's hold, taken over after it
}


def made(make: Callable[[Place], TestDestination], place: Place, monkeypatch) -> TestDestination:
    """The test destination of ``make`` at ``place``, its environment references set (as
    :func:`support.destinations.make` sets them)."""
    from transfer_platform.destinations.manifests import new_signing_key

    destination = make(place)
    for name, value in destination.details.get("env", {}).items():
        monkeypatch.setenv(name, value)
    if "signing_key" in destination.block:
        monkeypatch.setenv(destinations.SIGNING_KEY_ENV, new_signing_key()[0])
    return destination


def missing(harnesses: dict[str, Any], vendors: list[str]) -> list[str]:
    """The ``vendors`` without a harness."""
    return [v for v in vendors if v not in harnesses]
