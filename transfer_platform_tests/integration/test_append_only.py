"""``is_append_only``: rows are only ever inserted; a row whose primary key is already in the
destination is skipped, never updated. PostgreSQL (``INSERT ... ON CONFLICT (key) DO NOTHING``)
and Delta (a MERGE with only ``when_not_matched_insert_all``), against a normal model that
updates the same row. The batch's own checks (a key twice in one batch) still apply, the
PostgreSQL empty-target fast path still serves the backfill, and a full refresh fills the table
built aside the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from transfer_platform.config.models import PlatformConfig
from transfer_platform.destinations.postgres.dialect import PostgresDialect
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support.config import pg_config
from transfer_platform_tests.support.destinations import ONE_ROW_PER_KEY
from transfer_platform_tests.support.events import (
    MODEL,
    Row,
    create_events,
    day,
    insert_rows,
    make_rows,
    normalize,
)
from transfer_platform_tests.support.lake import delivered, lake_config, write_lake
from transfer_platform_tests.support.postgres import destination_rows
from transfer_platform_tests.support.transfers import refresh_step_by_step, transfer

pytestmark = pytest.mark.integration

MIN_START = day(3, 1)
DATA_DAYS = [day(3, 1), day(3, 2), day(3, 3)]
NOW1 = day(3, 4) + timedelta(hours=12)
NOW2 = day(3, 5) + timedelta(hours=6)
TENANT = "acme"


def append_only(config: PlatformConfig, flag: bool) -> PlatformConfig:
    """The same configuration with the (single) model's ``is_append_only`` set to ``flag``."""
    model = config.model(MODEL).model_copy(update={"is_append_only": flag})
    return config.model_copy(update={"models": [model]})


@dataclass
class Setup:
    """A source holding ``rows`` (replaced whole by ``write``) and its destination's rows."""

    config: PlatformConfig
    write: Callable[[list[Row]], None]
    delivered: Callable[[], list[Row]]


@pytest.fixture(params=ONE_ROW_PER_KEY)
def setup(request, pg_conn, pg_schema, dst_schema, tmp_path: Path) -> Setup:
    if request.param == "postgres":
        # no primary key in the source, so that a batch can hold a key twice
        create_events(pg_conn, pg_schema, primary_key=False)

        def write_pg(rows: list[Row]) -> None:
            pg_conn.execute(f'DELETE FROM "{pg_schema}".events')
            insert_rows(pg_conn, pg_schema, rows)

        config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=MIN_START)
        return Setup(config, write_pg, lambda: destination_rows(pg_conn, dst_schema))
    lake, delta_root = tmp_path / "lake", tmp_path / "delta"
    config = lake_config(lake, delta_root, tenant=TENANT, min_start=MIN_START)
    return Setup(config, lambda rows: write_lake(lake, rows), lambda: delivered(delta_root))


def tenant_rows(rows: list[Row]) -> list[Row]:
    return normalize(r for r in rows if r[1] == TENANT)


@pytest.mark.parametrize("is_append_only", [True, False], ids=["append-only", "normal"])
def test_an_append_only_model_inserts_new_rows_and_never_updates_delivered_ones(spark, setup, is_append_only):
    config = append_only(setup.config, is_append_only)
    rows = make_rows([TENANT, "globex"], 20, DATA_DAYS, seed=31)
    setup.write(rows)
    first = transfer(spark, config, NOW1)
    assert first.status == "SUCCESS", first.error
    assert setup.delivered() == tenant_rows(rows)

    # a delivered row changes in the source (newer last-modified, other payload); a row is added
    old = tenant_rows(rows)[3]
    updated = (old[0], TENANT, NOW1 + timedelta(hours=1, microseconds=7), "changed after delivery")
    added = (9001, TENANT, NOW1 + timedelta(hours=2, microseconds=9), "added after delivery")
    changed_rows = [updated if r[0] == old[0] else r for r in rows] + [added]
    setup.write(changed_rows)

    second = transfer(spark, config, NOW2, transfer_id="t2")

    assert second.status == "SUCCESS", second.error
    delivered_now = setup.delivered()
    assert added in delivered_now
    if is_append_only:
        assert old in delivered_now
        assert updated not in delivered_now
        assert delivered_now == tenant_rows(rows + [added])
    else:
        assert updated in delivered_now
        assert old not in delivered_now
        assert delivered_now == tenant_rows(changed_rows)
    # the next transfer re-reads the newest row (the lookback before the high watermark) and
    # changes nothing
    third = transfer(spark, config, NOW2 + timedelta(hours=1), transfer_id="t3")
    assert third.status == "SUCCESS", third.error
    assert (third.delta_rows_transferred, setup.delivered()) == (0, delivered_now)


def test_a_key_twice_in_one_batch_is_still_refused(spark, setup):
    """Two versions of a key with the same last-modified value: refused (DO NOTHING, and an
    insert-only MERGE, would keep one of the two silently). Two versions with different values
    are resolved by them: the later one is inserted."""
    config = append_only(setup.config, True)
    rows = make_rows([TENANT, "globex"], 10, DATA_DAYS, seed=32)
    setup.write(rows)
    assert transfer(spark, config, NOW1).status == "SUCCESS"
    before = setup.delivered()
    twice = [(9002, TENANT, NOW1 + timedelta(hours=1), "first"), (9002, TENANT, NOW1 + timedelta(hours=1), "second")]
    setup.write(rows + twice)

    summary = transfer(spark, config, NOW2, transfer_id="t2")

    assert summary.status == "ERROR"
    assert summary.error_type == "DataError"
    assert "two different versions of key id=9002 have the same, latest last-modified value" in summary.error
    assert setup.delivered() == before

    setup.write([*rows, twice[0], (9002, TENANT, NOW1 + timedelta(hours=2), "second")])
    summary = transfer(spark, config, NOW2, transfer_id="t3")
    assert summary.status == "SUCCESS", summary.error
    assert [r for r in setup.delivered() if r[0] == 9002] == [(9002, TENANT, NOW1 + timedelta(hours=2), "second")]


@pytest.mark.parametrize("is_append_only", [True, False], ids=["append-only", "normal"])
def test_a_full_refresh_fills_the_table_aside_the_same_way(spark, setup, is_append_only, monkeypatch):
    """A row delivered aside by the refresh's first window changes in the source before the
    second window reads it again: the append-only model keeps the version it inserted first.
    (Each window read alone, ``run_rows`` 0: small neighbours are otherwise read in one job, before
    the first commits.)"""
    tuning = Tuning(run_rows=0)
    config = append_only(setup.config, is_append_only)
    rows = make_rows([TENANT, "globex"], 12, DATA_DAYS, seed=33)
    setup.write(rows)
    assert transfer(spark, config, NOW1).status == "SUCCESS"
    first_day = [r for r in tenant_rows(rows) if r[2] < day(3, 2)]
    old = first_day[0]
    updated = (old[0], TENANT, day(3, 2) + timedelta(hours=5, microseconds=11), "changed during the refresh")
    changed_rows = [updated if r[0] == old[0] else r for r in rows]
    windows = []

    def after_window() -> None:
        windows.append(1)
        if len(windows) == 1:  # the window of March 1st has committed aside
            setup.write(changed_rows)

    refresh_step_by_step(spark, config, NOW2, after_window, tuning)

    assert len(windows) == 5  # March 1st to 5th
    if is_append_only:
        assert setup.delivered() == tenant_rows(rows)
    else:
        assert setup.delivered() == tenant_rows(changed_rows)


def test_the_empty_target_fast_path_still_serves_an_append_only_backfill(spark, pg_conn, pg_schema, dst_schema):
    create_events(pg_conn, pg_schema)
    rows = make_rows([TENANT, "globex"], 10, DATA_DAYS, seed=34)
    insert_rows(pg_conn, pg_schema, rows)
    config = append_only(pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT,
                                   min_start=MIN_START), True)
    pg_conn.execute(f'CREATE SCHEMA "{dst_schema}"')
    pg_conn.execute(PostgresDialect().target_ddl(f'"{dst_schema}"."{MODEL}"', config.model(MODEL)))
    before = pg_conn.execute("SELECT %s::regclass::oid", (f'"{dst_schema}"."{MODEL}"',)).fetchone()[0]

    assert transfer(spark, config, NOW1).status == "SUCCESS"

    after = pg_conn.execute("SELECT %s::regclass::oid", (f'"{dst_schema}"."{MODEL}"',)).fetchone()[0]
    assert after != before  # the loaded staging table became the target
    assert destination_rows(pg_conn, dst_schema) == tenant_rows(rows)
