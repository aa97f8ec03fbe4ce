"""A model's ``source_query`` on every source vendor, and the query PostgreSQL receives.

The change and tenant predicates apply *outside* a custom query (as the reference system's seed
shows); a query whose columns do not match the model is refused with an error that says which
columns are missing, which it returns and how to fix it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.errors import ConfigError
from transfer_platform.sources.base import ReadRequest, reader_for
from transfer_platform_tests.support.config import DESTINATION, config_for, events_model, pg_config
from transfer_platform_tests.support.events import (
    MODEL,
    day,
    epoch,
    insert_rows,
    make_rows,
    normalize,
    source_rows,
)
from transfer_platform_tests.support.mysql import (
    mysql_create_events,
    mysql_insert_rows,
    mysql_source,
    mysql_source_rows,
)
from transfer_platform_tests.support.postgres import destination_rows, pg_connection_config
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

TENANT = "acme"
MIN_START = day(3, 1)
DATA_DAYS = [day(3, 1), day(3, 2), day(3, 3)]
NOW = day(3, 4)


def query_model(query: str, *, min_start: datetime = MIN_START, window: int | None = 86400,
                **changes) -> dict:
    model = {**events_model("unused", min_start=min_start), "source_table": None, "source_query": query,
             "max_transfer_time_window_seconds": window}
    return {**model, **changes}


def pg_source(**settings) -> dict:
    return {"vendor": "postgres", "connection": pg_connection_config(), **settings}


def create_pg_events(pg_conn, schema: str, table: str = "events", lm_type: str = "timestamptz") -> None:
    pg_conn.execute(f'CREATE TABLE "{schema}"."{table}" (id bigint PRIMARY KEY, organization_id text, '
                    f"updated_at {lm_type}, payload text)")


# -- the seed's precision case (PostgreSQL) ----------------------------------------------------------

ROW_1_AT = datetime(2025, 1, 1, 0, 0, 1, 600_000, tzinfo=UTC)
ROW_2_AT = datetime(2025, 1, 1, 0, 0, 1, 900_000, tzinfo=UTC)


@pytest.mark.parametrize("first_now", [datetime(2025, 1, 1, 0, 0, 1, 750_000, tzinfo=UTC),
                                       datetime(2025, 1, 1, 0, 0, 2, tzinfo=UTC)],
                         ids=["watermark-between-the-rows", "watermark-rounded-up"])
def test_a_row_committed_later_within_the_same_second_is_not_skipped(
        spark, pg_conn, pg_schema, dst_schema, first_now):
    """The seed: a row at 00:00:01.600 is transferred, a row at 00:00:01.900 committed afterwards.
    The watermark keeps microseconds (first case) and the lookback applies outside the query
    (second case: the watermark is past the late row), so both rows arrive, exactly."""
    create_pg_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, [(1, TENANT, ROW_1_AT, "first"), (2, "globex", ROW_1_AT, "other")])
    query = f'SELECT id, organization_id, updated_at, payload FROM "{pg_schema}".events'
    model = query_model(query, min_start=datetime(2025, 1, 1, tzinfo=UTC), window=None)
    config = config_for(pg_source(), model, tenant=TENANT, dst_schema=dst_schema)

    first = transfer(spark, config, first_now)
    assert first.status == "SUCCESS", first.error
    assert first.state.watermark == first_now
    insert_rows(pg_conn, pg_schema, [(3, TENANT, ROW_2_AT, "committed later")])
    second = transfer(spark, config, datetime(2025, 1, 1, 0, 5, tzinfo=UTC), transfer_id="t2")

    assert second.status == "SUCCESS", second.error
    assert destination_rows(pg_conn, dst_schema) == [(1, TENANT, ROW_1_AT, "first"),
                                                     (3, TENANT, ROW_2_AT, "committed later")]


# -- predicates outside the query, per vendor -------------------------------------------------------


def test_postgres_query_with_its_own_where_and_join(spark, pg_conn, pg_schema, dst_schema):
    create_pg_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "globex"], 10, DATA_DAYS, seed=21))
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".hidden (id bigint PRIMARY KEY)')
    pg_conn.execute(f'INSERT INTO "{pg_schema}".hidden SELECT id FROM "{pg_schema}".events WHERE id % 4 = 0')
    query = (f'SELECT e.id, e.organization_id, e.updated_at, upper(e.payload) AS payload '
             f'FROM "{pg_schema}".events e LEFT JOIN "{pg_schema}".hidden h ON h.id = e.id '
             "WHERE h.id IS NULL ORDER BY e.id;")
    config = config_for(pg_source(), query_model(query, min_start=day(3, 2)), tenant=TENANT,
                        dst_schema=dst_schema)

    summary = transfer(spark, config, NOW)

    assert summary.status == "SUCCESS", summary.error
    expected = [(k, org, at, None if p is None else p.upper())
                for k, org, at, p in source_rows(pg_conn, pg_schema, TENANT)
                if k % 4 and at >= day(3, 2)]
    assert expected
    assert destination_rows(pg_conn, dst_schema) == expected


def test_mysql_query_is_a_derived_table_with_the_predicates_outside(
        spark, mysql_conn, mysql_database, dst_schema, pg_conn):
    mysql_create_events(mysql_conn)
    mysql_insert_rows(mysql_conn, make_rows([TENANT, "globex", "ACME"], 10, DATA_DAYS, seed=22))
    with mysql_conn.cursor() as cur:
        cur.execute("CREATE TABLE labels (id BIGINT PRIMARY KEY, label VARCHAR(20))")
        cur.execute("INSERT INTO labels SELECT id, CONCAT('label ', id) FROM events WHERE id % 3 <> 0")
    query = ("SELECT e.id, e.organization_id, e.updated_at, l.label AS payload "
             "FROM events e JOIN labels l ON l.id = e.id ORDER BY e.id;")
    model = query_model(query, min_start=day(3, 2))
    config = config_for(mysql_source(mysql_database), model, tenant=TENANT, dst_schema=dst_schema)

    summary = transfer(spark, config, NOW)

    assert summary.status == "SUCCESS", summary.error
    expected = [(k, org, at, f"label {k}") for k, org, at, _ in mysql_source_rows(mysql_conn, TENANT)
                if k % 3 and at >= day(3, 2)]
    assert expected
    assert destination_rows(pg_conn, dst_schema) == expected


def write_parquet(folder, columns: dict[str, pa.Array]) -> None:
    folder.mkdir(parents=True)
    pq.write_table(pa.table(columns), folder / "part-0.parquet")


def test_parquet_query_runs_over_the_lakes_table_folders(spark, tmp_path, dst_schema, pg_conn):
    rows = make_rows([TENANT, "globex", "ACME"], 10, DATA_DAYS, seed=23)
    lake = tmp_path / "lake"
    write_parquet(lake / "events", {
        "id": pa.array([r[0] for r in rows], pa.int64()),
        "organization_id": pa.array([r[1] for r in rows]),
        "updated_at": pa.array([r[2] for r in rows], pa.timestamp("us", tz="UTC")),
    })
    write_parquet(lake / "event-labels", {
        "event_id": pa.array([r[0] for r in rows if r[0] % 3], pa.int64()),
        "label": pa.array([f"label {r[0]}" for r in rows if r[0] % 3]),
    })
    write_parquet(lake / "unrelated", {"x": pa.array([1])})
    query = ("SELECT e.id, e.organization_id, e.updated_at, l.label AS payload "
             "FROM events e JOIN `event-labels` l ON l.event_id = e.id")
    source = {"vendor": "parquet", "connection": {"path": str(lake)}}
    config = config_for(source, query_model(query, min_start=day(3, 2)), tenant=TENANT,
                        dst_schema=dst_schema)

    summary = transfer(spark, config, NOW)

    assert summary.status == "SUCCESS", summary.error
    expected = normalize([(k, org, at, f"label {k}") for k, org, at, _ in rows
                          if org == TENANT and k % 3 and at >= day(3, 2)])
    assert expected
    assert destination_rows(pg_conn, dst_schema) == expected
    assert not spark.catalog.tableExists("events")  # the views stay in the reader's own session


# -- a query whose columns do not match the model -----------------------------------------------------


@pytest.fixture
def mismatch_source(request, pg_conn, pg_schema, mysql_conn, mysql_database, tmp_path):
    """(source block, query) where the query returns id, org, lm: not the model's names."""
    vendor = request.param
    if vendor == "postgres":
        create_pg_events(pg_conn, pg_schema)
        return pg_source(), ("SELECT id, organization_id AS org, updated_at AS lm "
                             f'FROM "{pg_schema}".events')
    if vendor == "mysql":
        mysql_create_events(mysql_conn)
        return mysql_source(mysql_database), ("SELECT id, organization_id AS org, updated_at AS lm "
                                              "FROM events")
    write_parquet(tmp_path / "lake" / "events", {"id": pa.array([1], pa.int64())})
    return ({"vendor": "parquet", "connection": {"path": str(tmp_path / "lake")}},
            "SELECT id, 'acme' AS org, current_timestamp() AS lm FROM events")


@pytest.mark.parametrize("mismatch_source", ["postgres", "mysql", "parquet"], indirect=True)
def test_a_query_missing_model_columns_is_refused_clearly(spark, mismatch_source, dst_schema):
    source, query = mismatch_source
    config = config_for(source, query_model(query), tenant=TENANT, dst_schema=dst_schema)
    bounds = ReadBounds(day(3, 1), NOW, Window(day(3, 1), NOW))

    with pytest.raises(ConfigError) as caught:
        reader_for(config.source("src")).read(spark, ReadRequest(config.model(MODEL), TENANT, bounds,
                                                                 DESTINATION))

    text = str(caught.value)
    assert f"model '{MODEL}'" in text
    assert f"destination '{DESTINATION}'" in text
    assert "does not return the column(s) organization_id, updated_at, payload" in text
    assert "it returns: id, org, lm" in text
    assert "AS updated_at" in caught.value.problems[0].fix


def test_a_query_missing_only_the_organization_column_is_refused(spark, pg_conn, pg_schema, dst_schema):
    """The organization column need not be one of the model's columns, but a multi-tenant query
    must return it."""
    create_pg_events(pg_conn, pg_schema)
    model = query_model(f'SELECT id, updated_at, payload FROM "{pg_schema}".events')
    model["columns"] = [c for c in model["columns"] if c["name_in_source"] != "organization_id"]
    config = config_for(pg_source(), model, tenant=TENANT, dst_schema=dst_schema)

    summary = transfer(spark, config, NOW)

    assert summary.status == "ERROR"
    assert summary.error_type == "ConfigError"
    assert "does not return the column(s) organization_id named by the model" in summary.error
    assert "it returns: id, updated_at, payload" in summary.error
    assert f"destination '{DESTINATION}'" in summary.error


# -- the query PostgreSQL receives: index-friendly timestamp literals ------------------------------


def plan_nodes(pg_conn, sql: str) -> list[dict]:
    """Every node of ``EXPLAIN (FORMAT JSON)``, sequential scans disabled (a deterministic choice)."""
    pg_conn.execute("SET enable_seqscan = off")
    try:
        (plan,) = pg_conn.execute("EXPLAIN (FORMAT JSON) " + sql).fetchone()
    finally:
        pg_conn.execute("RESET enable_seqscan")
    plan = json.loads(plan) if isinstance(plan, str) else plan
    nodes, todo = [], [plan[0]["Plan"]]
    while todo:
        node = todo.pop()
        nodes.append(node)
        todo.extend(node.get("Plans", []))
    return nodes


def generated_query(config, model_name: str = MODEL, *, lower: datetime, upper: datetime) -> str:
    reader = reader_for(config.source("src"))
    return reader.query_for(ReadRequest(config.model(model_name), TENANT,
                                        ReadBounds(lower, upper, Window(lower, upper)), DESTINATION))


@pytest.mark.parametrize("lm_type", ["timestamp", "timestamptz"])
def test_the_change_predicate_uses_the_last_modified_index(pg_conn, pg_schema, dst_schema, lm_type):
    create_pg_events(pg_conn, pg_schema, lm_type=lm_type)
    pg_conn.execute(f'CREATE INDEX tp_lm_idx ON "{pg_schema}".events (updated_at)')
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "globex"], 200, DATA_DAYS, seed=24))
    pg_conn.execute(f'ANALYZE "{pg_schema}".events')
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=day(3, 1))
    sql = generated_query(config, lower=day(3, 2) - timedelta(seconds=30), upper=day(3, 3))

    index_scans = [n for n in plan_nodes(pg_conn, sql) if n.get("Index Name") == "tp_lm_idx"]

    assert any("updated_at >=" in n.get("Index Cond", "") for n in index_scans), index_scans


def test_a_timestamp_partitioned_table_is_pruned_when_planning(pg_conn, pg_schema, dst_schema):
    """A typed ``TIMESTAMPTZ`` literal compared with a ``timestamp`` column is a stable cross-type
    comparison: PostgreSQL keeps every partition in the plan and prunes them only when it runs.
    The untyped literal takes the column's type, so the plan holds only the window's partition."""
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".events (id bigint, organization_id text, '
                    "updated_at timestamp, payload text) PARTITION BY RANGE (updated_at)")
    for month in (2, 3, 4):
        pg_conn.execute(f'CREATE TABLE "{pg_schema}".events_{month:02} PARTITION OF "{pg_schema}".events '
                        f"FOR VALUES FROM ('2024-{month:02}-01') TO ('2024-{month + 1:02}-01')")
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=day(3, 1))
    sql = generated_query(config, lower=day(3, 2), upper=day(3, 3))

    nodes = plan_nodes(pg_conn, sql)

    assert {n["Relation Name"] for n in nodes if "Relation Name" in n} == {"events_03"}
    assert not any("Subplans Removed" in n for n in nodes), nodes


def test_a_timestamp_without_time_zone_column_arrives_intact(spark, pg_conn, pg_schema, dst_schema):
    """Naive values are UTC wall-clock times; a row 1 µs before midnight belongs to the day before
    (and is read again by the next day's lookback), a row at midnight to its own day."""
    create_pg_events(pg_conn, pg_schema, lm_type="timestamp")
    rows = make_rows([TENANT, "globex"], 10, DATA_DAYS, seed=25)
    rows += [(9001, TENANT, day(3, 2) - timedelta(microseconds=1), "just before midnight"),
             (9002, TENANT, day(3, 2), "at midnight")]
    insert_rows(pg_conn, pg_schema, [(k, o, at.replace(tzinfo=None), p) for k, o, at, p in rows])
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=day(3, 1))

    summary = transfer(spark, config, NOW)

    assert summary.status == "SUCCESS", summary.error
    expected = normalize([r for r in rows if r[1] == TENANT])
    assert all(r[2].microsecond for r in expected if r[0] != 9002)
    assert destination_rows(pg_conn, dst_schema) == expected
    assert summary.rows_transferred == len(expected) + 1  # 9001 again in the 03-02 lookback
    assert summary.delta_rows_transferred == len(expected)
    assert epoch(max(r[2] for r in expected)) == epoch(summary.state.high_watermark)
