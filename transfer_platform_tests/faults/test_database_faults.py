"""Faults between the platform and the databases it reads and writes: a TCP proxy of the tests
(support/tcp_proxy.py) between the transfer and the source (PostgreSQL, MariaDB) or the destination
(PostgreSQL, MariaDB, the S3 server) drops or resets its connections in the middle of the data
(after a number of bytes), during a backfill (several windows) and during an incremental.

Afterwards, read through the destination's own client (not the writer):

- the run ends ERROR with a one-line error that names who is to blame, or (a retry inside the run)
  SUCCESS with every row;
- nothing lost, nothing duplicated: the destination holds exactly the tenant's source rows up to
  its watermark (the watermark is where the rows are);
- the next transfer, the fault healed, recovers by itself and delivers exactly the tenant's rows.

Each test adds a row to the suite's table (printed at the end of the session).
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform_tests.support import destinations
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.events import MODEL
from transfer_platform_tests.support.faults import record
from transfer_platform_tests.support.mysql import (
    MYSQL,
    mysql_connect,
    mysql_create_events,
    mysql_ident,
    mysql_insert_rows,
    mysql_source,
)
from transfer_platform_tests.support.postgres import PG, pg_connection_config
from transfer_platform_tests.support.tcp_proxy import tcp_proxy
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

TENANT, OTHER = "acme", "globex"
#: the clock of the tests: the backfill's "now", the incremental's, the recovery's
BACKFILL_AT = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(days=1)
MIN_START = BACKFILL_AT - timedelta(hours=4)
INCREMENTAL_AT = BACKFILL_AT + timedelta(minutes=20)
RECOVERY_AT = BACKFILL_AT + timedelta(minutes=30)
BACKFILL_ROWS, INCREMENTAL_ROWS = 8_000, 8_000

#: bytes that pass before the fault strikes, per link: past the connection's handshake and the
#: metadata queries, inside the rows (about 1 MB per transfer)
AFTER_BYTES = {"source": 300_000, "destination": 150_000}


def rows_between(first_id: int, count: int, start: datetime, span: timedelta, tenant: str) -> list[tuple]:
    step = span / count
    # payloads of 128 hex digits: wide rows that compress little, so that a fault after some bytes
    # lands inside the data whatever the format (COPY, LOAD DATA, Parquet)
    return [(first_id + i, tenant, start + step * i + timedelta(microseconds=7),
             hashlib.sha512(f"{tenant}{first_id + i}".encode()).hexdigest()) for i in range(count)]


# -- sources ----------------------------------------------------------------------------------------


@dataclass
class Source:
    block: dict  # the source entry, its connection through the proxy
    table: str
    insert: callable


def postgres_source(pg_conn, schema: str, port: int) -> Source:
    pg_conn.execute(f'CREATE TABLE "{schema}".events (id bigint PRIMARY KEY, organization_id text, '
                    "updated_at timestamptz, payload text)")

    def insert(rows: list[tuple]) -> None:
        with pg_conn.cursor() as cur, cur.copy(f'COPY "{schema}".events FROM STDIN') as copy:
            for row in rows:
                copy.write_row(row)

    return Source({"vendor": "postgres", "connection": {**pg_connection_config(), "port": port}},
                  f"{schema}.events", insert)


def mysql_source_at(database: str, port: int) -> Source:
    conn = mysql_connect(database)
    mysql_create_events(conn)
    block = mysql_source(database)
    block["connection"]["port"] = port
    return Source(block, f"{database}.events", lambda rows: mysql_insert_rows(conn, rows))


def source_of(vendor: str, pg_conn, pg_schema: str, mysql_databases: list[str], port: int | None) -> Source:
    """The events table in a PostgreSQL schema or a new MySQL database, read through ``port``
    (the proxy; ``None``: the server's own port)."""
    if vendor == "postgres":
        return postgres_source(pg_conn, pg_schema, port or PG["port"])
    database = f"tp_flt_{uuid.uuid4().hex[:10]}"
    mysql_databases.append(database)
    admin = mysql_connect()
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {mysql_ident(database)} CHARACTER SET utf8mb4")
    admin.close()
    return mysql_source_at(database, port or MYSQL["port"])


# -- the cases -------------------------------------------------------------------------------------

#: (path, the link the proxy cuts, source vendor, destination variant)
PATHS = [
    ("source postgres", "source", "postgres", "postgres"),
    ("source mysql", "source", "mysql", "postgres"),
    ("destination postgres", "destination", "postgres", "postgres"),
    ("destination mysql", "destination", "postgres", "mysql"),
    ("destination s3", "destination", "postgres", "s3"),
]


#: each path: a drop during the backfill and during the incremental; a reset (RST) during the
#: backfill of each database (the S3 client's retry is the same for both)
CASES = [(*p, fault, phase) for p in PATHS for fault, phase in (("drop", "backfill"), ("drop", "incremental"),
                                                                 ("reset", "backfill"))
         if fault == "drop" or p[3] != "s3" and (p[1] == "source" or p[3] == "postgres")]


@pytest.fixture
def mysql_databases():
    names: list[str] = []
    yield names
    admin = mysql_connect()
    with admin.cursor() as cur:
        for name in names:
            cur.execute(f"DROP DATABASE IF EXISTS {mysql_ident(name)}")
    admin.close()


def through_proxy(destination: destinations.TestDestination, port: int, s3_endpoint: str | None) -> dict:
    """The destination's entry with its connection through the proxy on ``port``."""
    block = {**destination.block, "connection": dict(destination.block["connection"])}
    if destination.vendor == "s3":
        block["connection"]["endpoint_url"] = s3_endpoint.rsplit(":", 1)[0] + f":{port}"
    else:
        block["connection"]["port"] = port
    return block


def config_of(source: Source, destination_block: dict) -> PlatformConfig:
    model = events_model(source.table, min_start=MIN_START)
    model["max_transfer_time_window_seconds"] = 3600
    return parse_config({
        "sources": [{"name": "src", **source.block}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", **destination_block}],
    }, now=BACKFILL_AT)


def watermark(config: PlatformConfig):
    writer = writer_for(config.destination(DESTINATION))
    try:
        return writer.committed_state(config.model(MODEL)).state.watermark
    finally:
        writer.close()


def as_read(rows: list[tuple]) -> list[dict]:
    return sorted(({"id": r[0], "organization_id": r[1], "updated_at": r[2], "payload": r[3]} for r in rows
                   if r[1] == TENANT), key=lambda r: r["id"])


@pytest.mark.parametrize(("path", "link", "source_vendor", "variant", "fault", "phase"), CASES,
                         ids=["-".join((p[0].replace(" ", "-"), p[4], p[5])) for p in CASES])
def test_a_connection_cut_mid_transfer_loses_and_duplicates_nothing(
        spark, pg_conn, pg_schema, new_schema, tmp_path, request, monkeypatch, mysql_databases,
        path, link, source_vendor, variant, fault, phase):
    place = destinations.Place(new_schema() if variant == "postgres" else f"tp_flt_{uuid.uuid4().hex[:10]}",
                               tmp_path / "destination", lambda: request.getfixturevalue("s3"))
    if variant == "mysql":
        mysql_databases.append(place.schema)
    destination = destinations.make(variant, place, monkeypatch)
    if link == "source":
        target = (PG["host"], PG["port"]) if source_vendor == "postgres" else (MYSQL["host"], MYSQL["port"])
    elif variant == "s3":
        endpoint = request.getfixturevalue("s3").endpoint
        target = ("127.0.0.1", int(endpoint.rsplit(":", 1)[1]))
    else:
        target = (PG["host"], PG["port"]) if variant == "postgres" else (MYSQL["host"], MYSQL["port"])

    with tcp_proxy(*target) as proxy:
        source = source_of(source_vendor, pg_conn, pg_schema, mysql_databases,
                           proxy.port if link == "source" else None)
        block = destination.block
        if link == "destination":
            s3_endpoint = request.getfixturevalue("s3").endpoint if variant == "s3" else None
            block = through_proxy(destination, proxy.port, s3_endpoint)
        config = config_of(source, block)
        direct = config_of(source, destination.block)  # the same destination, not through the proxy
        model = config.model(MODEL)

        rows = rows_between(1, BACKFILL_ROWS, MIN_START, BACKFILL_AT - MIN_START - timedelta(minutes=1), TENANT)
        rows += rows_between(100_000, 1_000, MIN_START, timedelta(hours=3), OTHER)
        source.insert(rows)
        faulted_at = BACKFILL_AT
        if phase == "incremental":
            assert transfer(spark, config, BACKFILL_AT, "backfill").status == "SUCCESS"
            assert destination.rows(model) == as_read(rows)
            new = rows_between(200_000, INCREMENTAL_ROWS, BACKFILL_AT + timedelta(seconds=1),
                               timedelta(minutes=18), TENANT)
            source.insert(new)
            rows += new
            faulted_at = INCREMENTAL_AT
        before = proxy.bytes_forwarded
        proxy.fault(fault, after_bytes=AFTER_BYTES[link])
        started = time.monotonic()
        summary = transfer(spark, config, faulted_at, f"faulted-{phase}")
        failed_in = time.monotonic() - started
        assert proxy.fired.is_set(), (
            f"the transfer ended before the fault ({proxy.bytes_forwarded - before} bytes passed): "
            "make the rows wider or AFTER_BYTES smaller")

        # what the destination holds: exactly the tenant's rows up to its watermark
        held, mark = destination.rows(model), watermark(direct)
        if summary.status == "SUCCESS":  # a retry inside the run: every row, the watermark at "now"
            outcome = "retried within the run: SUCCESS, every row"
            assert mark == faulted_at
            assert held == as_read(rows)
        else:
            assert summary.status == "ERROR"
            assert summary.error, summary
            assert "\n" not in summary.error.strip(), summary.error
            assert summary.blame in ("provider", "recipient", "platform"), summary
            expected = as_read([r for r in rows if mark is not None and r[2] < mark])
            assert (held or []) == expected, f"{len(held or [])} rows held, {len(expected)} up to the watermark {mark}"
            if phase == "incremental":
                assert mark >= BACKFILL_AT
            outcome = (f"ERROR ({summary.blame}) in {failed_in:.1f} s: {summary.error_type}; "
                       f"{len(held or [])} rows held = source up to the watermark")

        # the next transfer recovers by itself
        proxy.heal()
        healed = time.monotonic()
        recovery = transfer(spark, config, RECOVERY_AT, f"after-{phase}")
        recovered_in = time.monotonic() - healed
        assert recovery.status == "SUCCESS", recovery.error
        assert destination.rows(model) == as_read(rows)
        assert watermark(direct) == RECOVERY_AT
    record(f"{fault} after {AFTER_BYTES[link] // 1000} kB", f"{path}, {phase}", outcome, recovered_in)


#: the sources' read_timeout_seconds in the stall cases, and how long after it the transfer must
#: have ended (its connections' set-up and clean-up, a busy machine)
READ_TIMEOUT, STALL_DEADLINE_SECONDS = 3, 60

#: how a stalled source is read: (case, source vendor, tuning)
STALL_PATHS = [
    ("postgres, windows read together by psycopg", "postgres", DEFAULT),
    ("postgres, each window relayed by Spark's tasks", "postgres", Tuning(run_rows=0)),
    ("postgres, Spark's JDBC reader", "postgres", Tuning(direct_reads=False, relay_windows=False)),
    ("mysql, Spark's JDBC reader", "mysql", DEFAULT),
]


@pytest.mark.parametrize(("case", "source_vendor", "tuning"), STALL_PATHS, ids=[p[0].split(",")[0] + "-" + str(i)
                                                                                 for i, p in enumerate(STALL_PATHS)])
def test_a_source_that_stops_answering_mid_read_fails_the_transfer_in_bounded_time(
        spark, pg_conn, pg_schema, new_schema, tmp_path, monkeypatch, request, mysql_databases,
        case, source_vendor, tuning):
    """A source that stops sending in the middle of the rows (the proxy holds the connections
    open and forwards nothing: a hung server, a lost route) ends the transfer once a read waited
    the source's read_timeout_seconds, with an error that names the source, the timeout and the
    fix; the destination keeps exactly the rows up to its watermark, and the next transfer, the
    source answering again, delivers every row."""
    place = destinations.Place(new_schema(), tmp_path / "destination", lambda: request.getfixturevalue("s3"))
    destination = destinations.make("postgres", place, monkeypatch)
    target = (PG["host"], PG["port"]) if source_vendor == "postgres" else (MYSQL["host"], MYSQL["port"])
    with tcp_proxy(*target) as proxy:
        source = source_of(source_vendor, pg_conn, pg_schema, mysql_databases, proxy.port)
        source.block["read_timeout_seconds"] = READ_TIMEOUT
        config = config_of(source, destination.block)
        model = config.model(MODEL)
        rows = rows_between(1, BACKFILL_ROWS, MIN_START, BACKFILL_AT - MIN_START - timedelta(minutes=1), TENANT)
        source.insert(rows)
        proxy.fault("stall", after_bytes=AFTER_BYTES["source"])
        summaries: list = []
        worker = threading.Thread(
            target=lambda: summaries.append(transfer(spark, config, BACKFILL_AT, "stalled", tuning=tuning)))
        worker.start()
        assert proxy.fired.wait(120), "the transfer never read that far"
        stalled_at = time.monotonic()
        worker.join(READ_TIMEOUT + STALL_DEADLINE_SECONDS)
        hung = worker.is_alive()
        ended_in = time.monotonic() - stalled_at
        proxy.heal()  # closes the held connections: a transfer still waiting ends (the test with it)
        worker.join(300)
        assert not hung, f"the transfer still ran {ended_in:.0f} s after its source stopped answering"
        (summary,) = summaries
        assert (summary.status, summary.blame) == ("ERROR", "provider"), summary
        assert "\n" not in summary.error.strip(), summary.error
        for words in (f"source 'src' at 127.0.0.1:{proxy.port}", f"sent nothing for {READ_TIMEOUT} s",
                      "read_timeout_seconds", "Fix:"):
            assert words in summary.error, summary.error
        held, mark = destination.rows(model), watermark(config_of(source, destination.block))
        expected = as_read([r for r in rows if mark is not None and r[2] < mark])
        assert (held or []) == expected, f"{len(held or [])} rows held, {len(expected)} up to the watermark {mark}"

        healed = time.monotonic()
        recovery = transfer(spark, config, RECOVERY_AT, "after-stall", tuning=tuning)
        assert recovery.status == "SUCCESS", recovery.error
        assert destination.rows(model) == as_read(rows)
    record("stall after 300 kB (server stops answering)", f"source {case}, backfill",
           f"ERROR ({summary.blame}) {ended_in:.1f} s after the stall (read_timeout_seconds {READ_TIMEOUT}); "
           f"{len(held or [])} rows held = source up to the watermark", time.monotonic() - healed)
