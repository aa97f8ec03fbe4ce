"""The contract every destination keeps, whatever its vendor: one suite, parametrized by the
vendor registry (``transfer_platform.vendors.DESTINATIONS``) through the test destinations of
``support.destinations`` (a registered vendor without one fails the first test here).

What a recipient expects (the seeds: upserts matched on the primary key, duplicates resolved by
the last-modified value; a key whose versions cannot be told apart is an error; a full refresh rebuilds; object
storage only adds files, its consumer keeping per key the latest version), read back as the
recipient reads it (``TestDestination.rows``), never through the writer under test:

- a later version of a row wins; an older version read again (inside the lookback) does not
  overwrite the newer one delivered;
- a row with a NULL key or a NULL last-modified value, and two versions of one key sharing their
  latest last-modified value (a conflict: no timestamp says which is current), are refused: the
  transfer fails, the destination's rows and watermark are as before; two versions of one key
  with different last-modified values deliver the latest (docs/design.md, duplicates);
- empty windows commit (the watermark moves on) and change no row;
- a full refresh makes the destination the source's rows exactly (rows gone from the source go);
- a column added to the model arrives; one dropped is refused unless ``allow_column_drop`` or a
  full refresh;
- a second transfer of a model is refused while another holds the model's lock;
- soft deletes remove the rows marked deleted; the delete sweep removes rows gone from the source
  where the vendor can remove rows, and a configuration asking object storage for it is refused;
- a dry run writes nothing;
- a seeded random history of inserts, updates and soft deletes over several transfers leaves the
  destination equal to the tenant's source rows after every transfer.

The source is the machine's PostgreSQL (one table, several tenants); the clock is fixed.
"""

from __future__ import annotations

import os
import random
from datetime import timedelta

import pytest

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.errors import ConfigError
from transfer_platform.transfers.delete_sweep import sweep_deletes
from transfer_platform.transfers.dry_run import plan_transfer
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support import destinations
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.events import MODEL, day
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.transfers import transfer

TENANT, OTHER = "acme", "o'ther"
MIN_START = day(3, 1)
BASE = day(3, 1) + timedelta(hours=1)
NOW1 = day(3, 2) + timedelta(hours=1)
NOW2 = NOW1 + timedelta(hours=1)
NOW3 = NOW2 + timedelta(hours=1)
#: random histories: how many (seeds 0..n-1); TP_CONTRACT_HISTORIES for a longer exploration
HISTORIES = int(os.environ.get("TP_CONTRACT_HISTORIES", "1"))

AMOUNT = {"name_in_source": "amount", "data_type": "integer"}
MARKER = {"name_in_source": "is_deleted", "data_type": "boolean", "is_deleted_marker": True}


def test_every_registered_destination_vendor_has_a_test_destination() -> None:
    assert destinations.missing_factories() == [], (
        "add a test destination of each to transfer_platform_tests/support/destinations.py (FACTORIES)")


# -- the source, the configuration, what the destination holds ------------------------------------


@pytest.fixture
def source(pg_conn, pg_schema) -> str:
    """The provider's table (no primary key: the source may hold what the contract refuses)."""
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".events (id bigint, organization_id text, '
                    "updated_at timestamptz, payload text, is_deleted boolean NOT NULL DEFAULT false)")
    return pg_schema


@pytest.fixture(params=destinations.variants())
def destination(request, new_schema, tmp_path, monkeypatch) -> destinations.TestDestination:
    place = destinations.Place(new_schema(), tmp_path / "destination", lambda: request.getfixturevalue("s3"),
                               lambda: request.getfixturevalue("azure_blob"), request.getfixturevalue)
    return destinations.make(request.param, place, monkeypatch)


def config_for(schema: str, destination: destinations.TestDestination, *, extra: tuple[dict, ...] = (),
               without: tuple[str, ...] = (), **model_settings) -> PlatformConfig:
    model = events_model(f"{schema}.events", min_start=MIN_START)
    model["columns"] = [c for c in model["columns"] if c["name_in_source"] not in without] + list(extra)
    model.update(model_settings)
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [destination.entry(DESTINATION, "rcpt")],
    }, now=day(6, 1))


def insert(conn, schema: str, *rows: tuple) -> None:
    """Rows (id, tenant, updated_at, payload[, is_deleted])."""
    with conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{schema}".events (id, organization_id, updated_at, payload, is_deleted) '
                        "VALUES (%s, %s, %s, %s, %s)", [(*r, False) if len(r) == 4 else r for r in rows])


def update(conn, schema: str, key: int, when, **values) -> None:
    sets = ", ".join(f"{name} = %s" for name in ("updated_at", *values))
    conn.execute(f'UPDATE "{schema}".events SET {sets} WHERE id = %s', (when, *values.values(), key))


def expected(conn, config: PlatformConfig) -> list[dict]:
    """The tenant's source rows in the model's columns (rows marked deleted left out unless kept)."""
    model = config.model(MODEL)
    names = [c.name_in_source for c in model.columns]
    where = "" if model.deletion_marker is None or model.keep_deleted_rows else " AND NOT is_deleted"
    table = model.source_table
    cursor = conn.execute(f"SELECT {', '.join(names)} FROM {table} WHERE organization_id = %s{where} ORDER BY id",
                          (TENANT,))
    return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


def watermark(config: PlatformConfig):  # the committed watermark (a datetime)
    writer = writer_for(config.destination(DESTINATION))
    try:
        return writer.committed_state(config.model(MODEL)).state.watermark
    finally:
        writer.close()


def held(destination: destinations.TestDestination, config: PlatformConfig) -> tuple:
    return destination.rows(config.model(MODEL)), watermark(config)


def succeeds(spark, config: PlatformConfig, now, transfer_id: str, **options) -> None:
    summary = transfer(spark, config, now, transfer_id, **options)
    assert summary.status == "SUCCESS", summary.error


def backfill(spark, conn, schema: str, destination, **settings) -> PlatformConfig:
    """Six rows of the tenant and three of another, delivered at NOW1."""
    insert(conn, schema, *[(k, TENANT, BASE + timedelta(minutes=k), f"v1-{k}") for k in range(1, 7)],
           *[(100 + k, OTHER, BASE + timedelta(minutes=k), "other") for k in range(3)])
    config = config_for(schema, destination, **settings)
    succeeds(spark, config, NOW1, "t1")
    assert destination.rows(config.model(MODEL)) == expected(conn, config)
    return config


# -- the contract -----------------------------------------------------------------------------------


@pytest.mark.integration
class TestDestinationContract:
    def test_a_later_version_wins_and_an_older_one_read_again_does_not_overwrite_the_newer(
            self, spark, pg_conn, source, destination) -> None:
        config = backfill(spark, pg_conn, source, destination)
        newest = 6  # the tenant's greatest delivered value: the next read starts 30 s before it
        update(pg_conn, source, 1, NOW1 + timedelta(minutes=5), payload="v2-1")
        update(pg_conn, source, newest, BASE + timedelta(minutes=newest, seconds=-10), payload="older")

        succeeds(spark, config, NOW2, "t2")

        want = [r if r["id"] != newest else {**r, "updated_at": BASE + timedelta(minutes=newest),
                                            "payload": f"v1-{newest}"} for r in expected(pg_conn, config)]
        assert destination.rows(config.model(MODEL)) == want
        assert [r["payload"] for r in want[:1]] == ["v2-1"]

    def test_null_keys_null_last_modified_values_and_conflicting_versions_are_refused_changing_nothing(
            self, spark, pg_conn, source, destination) -> None:
        config = backfill(spark, pg_conn, source, destination)
        before = held(destination, config)
        later = NOW1 + timedelta(minutes=5)
        bad_rows = {"a NULL key": [(None, TENANT, later, "bad")],
                    "a NULL last-modified value": [(7, TENANT, None, "bad")],
                    "two versions of a key with one last-modified value": [(8, TENANT, later, "bad"),
                                                                          (8, TENANT, later, "bad too")]}
        for n, (what, rows) in enumerate(bad_rows.items()):
            insert(pg_conn, source, *rows, (9, TENANT, later, "good"))
            refused = transfer(spark, config, NOW2, f"bad{n}")
            assert refused.status == "ERROR", what
            assert held(destination, config) == before, what
            pg_conn.execute(f'DELETE FROM "{source}".events WHERE id = 9 OR payload LIKE %s', ("bad%",))

        # two versions of a key with different last-modified values: the latest is delivered
        insert(pg_conn, source, (8, TENANT, later, "older"), (8, TENANT, later + timedelta(seconds=1), "latest"))
        succeeds(spark, config, NOW2, "t2")
        want = [r for r in expected(pg_conn, config) if r["payload"] != "older"]
        assert destination.rows(config.model(MODEL)) == want
        assert [r["payload"] for r in want if r["id"] == 8] == ["latest"]

    def test_empty_windows_commit_and_change_no_row(self, spark, pg_conn, source, destination) -> None:
        config = backfill(spark, pg_conn, source, destination)
        rows, first = held(destination, config)
        assert first == NOW1
        later = NOW1 + timedelta(days=3)  # three more daily windows, none holding a row of the tenant
        insert(pg_conn, source, (200, OTHER, NOW1 + timedelta(days=1), "other"))

        succeeds(spark, config, later, "t2")

        assert held(destination, config) == (rows, later)

    def test_a_full_refresh_makes_the_destination_the_source(self, spark, pg_conn, source, destination) -> None:
        config = backfill(spark, pg_conn, source, destination)
        pg_conn.execute(f'DELETE FROM "{source}".events WHERE id = 2')  # gone: only a refresh removes it
        update(pg_conn, source, 3, BASE, payload="rewritten, older")  # taken as the source has it
        insert(pg_conn, source, (7, TENANT, NOW1 + timedelta(minutes=1), "new"))

        succeeds(spark, config, NOW2, "refresh", full_refresh=True)

        assert held(destination, config) == (expected(pg_conn, config), NOW2)

    @pytest.mark.parametrize("how", ["allow_column_drop", "full_refresh"])
    def test_an_added_column_arrives_and_a_dropped_one_only_when_allowed(
            self, spark, pg_conn, source, destination, how) -> None:
        backfill(spark, pg_conn, source, destination)
        pg_conn.execute(f'ALTER TABLE "{source}".events ADD COLUMN amount bigint')
        update(pg_conn, source, 1, NOW1 + timedelta(minutes=5), amount=11)
        insert(pg_conn, source, (7, TENANT, NOW1 + timedelta(minutes=6), "new"))
        update(pg_conn, source, 7, NOW1 + timedelta(minutes=6), amount=17)
        added = config_for(source, destination, extra=(AMOUNT,))

        succeeds(spark, added, NOW2, "t2")
        assert destination.rows(added.model(MODEL)) == expected(pg_conn, added)

        before = held(destination, added)
        dropped = config_for(source, destination, extra=(AMOUNT,), without=("payload",))
        refused = transfer(spark, dropped, NOW3, "t3")
        assert refused.status == "ERROR"
        assert "payload" in refused.error
        assert held(destination, added) == before

        if how == "allow_column_drop":
            succeeds(spark, config_for(source, destination, extra=(AMOUNT,), without=("payload",),
                                       allow_column_drop=True), NOW3, "t4")
        else:
            succeeds(spark, dropped, NOW3, "t4", full_refresh=True)
        assert held(destination, dropped) == (expected(pg_conn, dropped), NOW3)

    def test_a_second_transfer_is_refused_while_one_holds_the_models_lock(
            self, spark, pg_conn, source, destination) -> None:
        config = backfill(spark, pg_conn, source, destination)
        before = held(destination, config)
        insert(pg_conn, source, (7, TENANT, NOW1 + timedelta(minutes=1), "new"))
        holder = writer_for(config.destination(DESTINATION))  # another transfer, as a live one holds it
        try:
            holder.lock_model(config.model(MODEL), "live-one")
            refused = transfer(spark, config, NOW2, "t2", tuning=Tuning(lock_wait_seconds=1))
            assert refused.status == "ERROR"
            assert "another transfer of this model to this destination is running" in refused.error
            assert held(destination, config) == before
        finally:
            holder.close()

        succeeds(spark, config, NOW2, "t3")
        assert destination.rows(config.model(MODEL)) == expected(pg_conn, config)

    def test_soft_deletes_remove_the_rows_marked_deleted(self, spark, pg_conn, source, destination) -> None:
        insert(pg_conn, source, (10, TENANT, BASE, "deleted before the backfill", True))
        config = backfill(spark, pg_conn, source, destination, extra=(MARKER,))
        assert 10 not in [r["id"] for r in destination.rows(config.model(MODEL))]
        update(pg_conn, source, 1, NOW1 + timedelta(minutes=1), is_deleted=True)
        update(pg_conn, source, 10, NOW1 + timedelta(minutes=2), is_deleted=False, payload="back")
        update(pg_conn, source, 100, NOW1 + timedelta(minutes=3), is_deleted=True)  # another tenant's

        succeeds(spark, config, NOW2, "t2")

        rows = destination.rows(config.model(MODEL))
        assert rows == expected(pg_conn, config)
        assert 1 not in [r["id"] for r in rows]
        assert 10 in [r["id"] for r in rows]

    def test_the_delete_sweep_removes_rows_gone_from_the_source_where_the_vendor_can(
            self, spark, pg_conn, source, destination) -> None:
        if not destination.sweeps_deletes:
            with pytest.raises(ConfigError, match="delete_detection: sweep"):
                config_for(source, destination, delete_detection="sweep")
            return
        config = backfill(spark, pg_conn, source, destination, delete_detection="sweep")
        pg_conn.execute(f'DELETE FROM "{source}".events WHERE id IN (1, 2, 101)')

        report = sweep_deletes(spark, config, DESTINATION, config.model(MODEL), NOW2, "s1")

        assert report.rows_deleted == 2
        assert held(destination, config) == (expected(pg_conn, config), NOW1)

    def test_a_dry_run_writes_nothing(self, spark, pg_conn, source, destination) -> None:
        insert(pg_conn, source, (1, TENANT, BASE, "v1"))
        config = config_for(source, destination)
        (plan,) = plan_transfer(spark, config, DESTINATION, config.models, NOW1)
        assert plan.status != "ERROR", plan
        assert destination.rows(config.model(MODEL)) is None  # never transferred: nothing there

        succeeds(spark, config, NOW1, "t1")
        before = held(destination, config)
        insert(pg_conn, source, (2, TENANT, NOW1 + timedelta(minutes=1), "v1"))
        (plan,) = plan_transfer(spark, config, DESTINATION, config.models, NOW2, full_refresh=True)
        assert plan.status != "ERROR", plan
        assert held(destination, config) == before

    @pytest.mark.parametrize("seed", range(HISTORIES))
    def test_a_random_history_leaves_the_destination_equal_to_the_source(
            self, spark, pg_conn, source, destination, seed) -> None:
        rng = random.Random(seed)
        config = config_for(source, destination, extra=(MARKER,))
        clock, keys, next_key = BASE, {TENANT: [], OTHER: []}, 1
        for round_ in range(4):
            for _ in range(rng.randint(1, 6)):
                clock += timedelta(seconds=rng.randint(1, 3600), microseconds=rng.randint(0, 999_999))
                tenant = rng.choice([TENANT, TENANT, OTHER])
                action = rng.choice(["insert", "update", "delete"]) if keys[tenant] else "insert"
                if action == "insert":
                    insert(pg_conn, source, (next_key, tenant, clock, f"v{rng.random():.6f}"))
                    keys[tenant].append(next_key)
                    next_key += 1
                else:
                    update(pg_conn, source, rng.choice(keys[tenant]), clock, payload=f"v{rng.random():.6f}",
                           is_deleted=action == "delete")
            clock += timedelta(seconds=rng.randint(1, 60))
            succeeds(spark, config, clock, f"t{round_}")
            assert (destination.rows(config.model(MODEL)) or []) == expected(pg_conn, config), round_
