"""The PostgreSQL destination's empty-target fast path.

A batch bound for an empty target that nothing depends on is staged in a logged table, which then
*becomes* the target (primary key built, empty target dropped, staging renamed, in the merge's
transaction): the rows are written once instead of twice. Anything a user attached to the target
(a view, an index, a trigger, a grant, a comment) turns the fast path off, and the batch is merged
as usual. A bad first batch is refused by name and leaves the empty target as it was.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from transfer_platform.config.models import ModelConfig
from transfer_platform.destinations.postgres.dialect import PostgresDialect
from transfer_platform_tests.support.config import pg_config
from transfer_platform_tests.support.events import (
    MODEL,
    create_events,
    day,
    insert_rows,
    make_rows,
    source_rows,
)
from transfer_platform_tests.support.postgres import destination_rows, status_row, tables_in
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

DATA_DAYS = [day(3, 1), day(3, 2), day(3, 3)]
NOW1 = day(3, 4) + timedelta(hours=12)
NOW2 = day(3, 5) + timedelta(hours=6)
TENANT = "acme"


@pytest.fixture
def config(pg_conn, pg_schema, dst_schema):
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "globex"], 30, DATA_DAYS, seed=11))
    return pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=day(3, 1))


def precreate_target(pg_conn, config, dst_schema) -> int:
    """The target as the platform creates it; returns its OID."""
    model: ModelConfig = config.model(MODEL)
    pg_conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{dst_schema}"')
    pg_conn.execute(PostgresDialect().target_ddl(f'"{dst_schema}"."{MODEL}"', model))
    return oid(pg_conn, dst_schema)


def oid(pg_conn, schema: str, table: str = MODEL) -> int:
    return pg_conn.execute("SELECT %s::regclass::oid", (f'"{schema}"."{table}"',)).fetchone()[0]


def table_facts(pg_conn, schema: str) -> tuple:
    return pg_conn.execute(
        "SELECT c.relpersistence, k.conname FROM pg_class c JOIN pg_constraint k ON k.conrelid = c.oid "
        "AND k.contype = 'p' WHERE c.oid = %s::regclass", (f'"{schema}"."{MODEL}"',)).fetchone()


def test_an_empty_target_is_replaced_by_the_loaded_staging_table(spark, pg_conn, pg_schema, dst_schema, config):
    before = precreate_target(pg_conn, config, dst_schema)

    assert transfer(spark, config, NOW1).status == "SUCCESS"

    assert oid(pg_conn, dst_schema) != before  # the fast path ran: the table is the staging table
    assert table_facts(pg_conn, dst_schema) == ("p", "events_pkey")  # logged, the usual key name
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    assert tables_in(pg_conn, dst_schema) == ["_transfer_status", MODEL]
    # the replaced table behaves as the original: its key refuses a duplicate, merges go on
    with pytest.raises(Exception, match="duplicate key value"):
        pg_conn.execute(f'INSERT INTO "{dst_schema}"."{MODEL}" SELECT * FROM "{dst_schema}"."{MODEL}" LIMIT 1')
    first = source_rows(pg_conn, pg_schema, TENANT)[0][0]
    pg_conn.execute(f'UPDATE "{pg_schema}".events SET payload = %s, updated_at = %s WHERE id = %s',
                    ("changed", NOW1 + timedelta(hours=1), first))
    replaced = oid(pg_conn, dst_schema)
    assert transfer(spark, config, NOW2, transfer_id="t2").status == "SUCCESS"
    assert oid(pg_conn, dst_schema) == replaced  # a non-empty target is merged into, never replaced
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)


ATTACHMENTS = {
    "view": 'CREATE VIEW "{s}".events_view AS SELECT id FROM "{s}".events',
    "index": 'CREATE INDEX events_payload ON "{s}".events (payload)',
    "trigger": ('CREATE FUNCTION "{s}".noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$; '
                'CREATE TRIGGER events_noop BEFORE INSERT ON "{s}".events FOR EACH ROW EXECUTE FUNCTION "{s}".noop()'),
    "grant": 'GRANT SELECT ON "{s}".events TO PUBLIC',
    "comment": "COMMENT ON TABLE \"{s}\".events IS 'delivered by transfer_platform'",
}


@pytest.mark.parametrize("attachment", sorted(ATTACHMENTS))
def test_an_empty_target_with_something_attached_is_merged_into(
        spark, pg_conn, pg_schema, dst_schema, config, attachment):
    before = precreate_target(pg_conn, config, dst_schema)
    pg_conn.execute(ATTACHMENTS[attachment].format(s=dst_schema))

    assert transfer(spark, config, NOW1).status == "SUCCESS"

    assert oid(pg_conn, dst_schema) == before  # the same table, with what was attached to it
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    attached = {
        "view": "SELECT count(*) FROM \"{s}\".events_view",
        "index": "SELECT count(*) FROM pg_indexes WHERE schemaname = '{s}' AND indexname = 'events_payload'",
        "trigger": "SELECT count(*) FROM pg_trigger WHERE tgname = 'events_noop'",
        "grant": "SELECT count(*) FROM information_schema.role_table_grants WHERE table_schema = '{s}' "
                 "AND grantee = 'PUBLIC'",
        "comment": "SELECT count(*) FROM pg_description WHERE objoid = '\"{s}\".events'::regclass",
    }[attachment].format(s=dst_schema)
    assert pg_conn.execute(attached).fetchone()[0] >= 1


@pytest.mark.parametrize("problem", ["duplicate", "null_key", "null_last_modified"])
def test_a_bad_first_batch_is_refused_by_name_and_leaves_the_empty_target(
        spark, pg_conn, pg_schema, dst_schema, config, problem):
    pg_conn.execute(f'ALTER TABLE "{pg_schema}".events DROP CONSTRAINT events_pkey, ALTER id DROP NOT NULL')
    # in the first window (3-1), so that no earlier window has filled the target
    key, _, when, _ = next(r for r in source_rows(pg_conn, pg_schema, TENANT) if r[2] < day(3, 2))
    bad = {
        "duplicate": (key, TENANT, when, "dup"),  # another version with the same last-modified value
        "null_key": (None, TENANT, day(3, 1) + timedelta(hours=2), "no key"),
        "null_last_modified": (4242, TENANT, None, "no time"),
    }[problem]
    insert_rows(pg_conn, pg_schema, [bad])
    before = precreate_target(pg_conn, config, dst_schema)

    summary = transfer(spark, config, NOW1)

    assert summary.status == "ERROR"
    assert summary.error_type == "DataError"
    expected = {"duplicate": f"two different versions of key id={key} have the same, latest last-modified value",
                "null_key": "NULL primary key value (id)",
                "null_last_modified": "NULL last-modified value (updated_at) at key id=4242"}[problem]
    assert expected in summary.error
    assert oid(pg_conn, dst_schema) == before  # the same, still empty, table
    assert destination_rows(pg_conn, dst_schema) == []
    assert tables_in(pg_conn, dst_schema) == ["_transfer_status", MODEL]  # no staging table left
    state = status_row(pg_conn, dst_schema)
    assert state is None or state["watermark"] is None
