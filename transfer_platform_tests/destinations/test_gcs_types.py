"""Every model data type delivered to a GCS bucket (fake-gcs-server) and read back as the
recipient reads it: the manifests and Parquet files fetched with google-cloud-storage, each value
compared with PostgreSQL's. Both ways a window's file is written: here in one upload (small
windows read together), and by Spark's executors through pyarrow's ``GcsFileSystem`` (a window
read alone)."""

from __future__ import annotations

import uuid
from datetime import date, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest

from transfer_platform.config.parsing import parse_config
from transfer_platform.core.timeutil import utc
from transfer_platform.destinations.manifests import new_signing_key
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.destinations import _consumed
from transfer_platform_tests.support.events import day
from transfer_platform_tests.support.gcs import gcs_reader
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.transfers import transfer
from transfer_platform_tests.support.typed import TYPED_COLUMNS

pytestmark = pytest.mark.integration

TENANT = "ac'me \"q\" \\ é"  # a tenant id with quotes, a backslash and unicode: data, never SQL or a path
MIN_START = day(3, 1)
BASE = day(3, 1) + timedelta(hours=1, microseconds=123_457)
NOW1 = day(3, 2) + timedelta(hours=1)
#: the widest decimals, microseconds, JSON and text with quotes, unicode and a newline, NULLs
TYPED_ROWS = [
    (1, TENANT, BASE, Decimal("12345678901234567890123456789.123456789"), '{"a": [1, 2.5, "x\\"y"], "é": null}',
     "quotes ' \" \\ and é, 😀\nsecond line", True, 0.1, date(1970, 1, 1)),
    (2, TENANT, BASE + timedelta(microseconds=1), Decimal("-99999999999999999999999999999.999999999"), "[]",
     "", False, -1.5e300, date(2999, 12, 31)),
    (3, TENANT, BASE + timedelta(hours=20, microseconds=999_998), Decimal("-0.000000001"), '"text"', None, None,
     None, None),
    (4, TENANT, BASE + timedelta(hours=3), None, None, "NULL", True, 2.0 ** -1074, date(2024, 2, 29)),
]

#: windows read together into this process (one upload), or read alone and written by Spark's executors
PATHS = {"together": Tuning(), "executors": Tuning(run_rows=0)}


@pytest.mark.parametrize("path_kind", list(PATHS))
def test_every_type_round_trips_exactly(spark, pg_conn, pg_schema, gcs_server, monkeypatch, path_kind) -> None:
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".typed (id bigint, organization_id text, updated_at timestamptz, '
                    "amount numeric(38,9), doc jsonb, note text, flag boolean, ratio double precision, born date)")
    with pg_conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{pg_schema}".typed VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)', TYPED_ROWS)
    bucket = f"types-{uuid.uuid4().hex[:12]}"
    gcs_server.create_bucket(bucket)
    monkeypatch.setenv("TP_TEST_SIGNING_KEY", new_signing_key()[0])
    model = events_model(f"{pg_schema}.typed", min_start=MIN_START)
    model["columns"] = TYPED_COLUMNS
    config = parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "gcs", "recipient": "rcpt", "signing_key": "${TP_TEST_SIGNING_KEY}",
                          "connection": {"bucket": bucket, "prefix": "acme", "endpoint_url": gcs_server.endpoint}}],
    })
    assert transfer(spark, config, NOW1, "t1", tuning=PATHS[path_kind]).status == "SUCCESS"

    keys, get = gcs_reader(gcs_server, bucket, "acme")
    got = _consumed(config.model(model["model_name"]), keys, get, "acme")
    names = ["id", "organization_id", "updated_at", "amount", "doc", "note", "flag", "ratio", "born"]
    want = pg_conn.execute(f'SELECT {", ".join(names).replace("doc", "doc::text")} FROM "{pg_schema}".typed '
                           "ORDER BY id").fetchall()
    assert [tuple(row[n] for n in names) for row in got] == [tuple(utc(v) if k == 2 else v for k, v in enumerate(r))
                                                              for r in want]
    assert [row["updated_at"].microsecond for row in got] == [123_457, 123_458, 123_455, 123_457]
    assert got[0]["updated_at"] - got[1]["updated_at"] == -timedelta(microseconds=1)

    import io

    import pyarrow.parquet as pq

    (data_file,) = [k for k in keys("acme/") if k.endswith(".parquet")][:1]
    schema = pq.read_schema(io.BytesIO(get(data_file)))
    assert {f.name: f.type for f in schema} == {
        "id": pa.int64(), "organization_id": pa.string(), "updated_at": pa.timestamp("us", tz="UTC"),
        "amount": pa.decimal128(38, 9), "doc": pa.string(), "note": pa.string(), "flag": pa.bool_(),
        "ratio": pa.float64(), "born": pa.date32()}
