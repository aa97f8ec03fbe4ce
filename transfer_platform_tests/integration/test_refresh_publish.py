"""How a PostgreSQL full refresh is published.

A live table nothing depends on is *replaced* by the complete aside table (locked, dropped, the
aside table and its key renamed into its place, in the transaction that moves the watermark): the
rows are written once, and the live table's OID is the aside table's. A live table something
depends on (a view, a grant to another role, a foreign key from another table, a trigger) keeps
its identity: its rows are replaced (truncated and refilled; merged when a foreign key references
it), and what depends on it goes on working. Whatever the path, a failure before the commit
leaves the live table, its rows and the watermark as they were, the refresh kept aside; readers
still using the table keep the publish from waiting longer than ``Tuning.lock_wait_seconds``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.postgres import REFRESH_PREFIX, PostgresWriter
from transfer_platform.errors import DataError
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support.config import pg_config
from transfer_platform_tests.support.events import (
    MODEL,
    create_events,
    day,
    insert_rows,
    make_rows,
    normalize,
    source_rows,
)
from transfer_platform_tests.support.postgres import (
    destination_rows,
    pg_connect,
    status_row,
    tables_in,
)
from transfer_platform_tests.support.transfers import refresh_step_by_step, transfer

pytestmark = pytest.mark.integration

MIN_START = day(2, 28)
DATA_DAYS = [day(3, 1), day(3, 2), day(3, 3)]
NOW1 = day(3, 4) + timedelta(hours=12)
NOW2 = day(3, 5) + timedelta(hours=6)
NOW3 = day(3, 5) + timedelta(hours=8)
TENANT = "acme"


@pytest.fixture
def backfilled(spark, pg_conn, pg_schema, dst_schema):
    """Source events of two tenants, delivered to ``dst_schema`` by a backfill at NOW1; then one
    source row deleted and some updated, which only a full refresh fully applies."""
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "globex"], 30, DATA_DAYS, seed=31))
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=MIN_START)
    assert transfer(spark, config, NOW1).status == "SUCCESS"
    rows = source_rows(pg_conn, pg_schema, TENANT)
    pg_conn.execute(f'DELETE FROM "{pg_schema}".events WHERE id = %s', (rows[-1][0],))
    pg_conn.execute(f'UPDATE "{pg_schema}".events SET payload = %s, updated_at = %s '
                    "WHERE organization_id = %s AND id %% 3 = 0", ("refreshed", NOW1 + timedelta(hours=1), TENANT))
    return config


def live(schema: str) -> str:
    return f'"{schema}"."{MODEL}"'


def table_oid(conn, schema: str, table: str = MODEL) -> int | None:
    return conn.execute("SELECT to_regclass(%s)::oid", (f'"{schema}"."{table}"',)).fetchone()[0]


def aside_tables(conn, schema: str) -> list[str]:
    return [t for t in tables_in(conn, schema) if t.startswith(REFRESH_PREFIX)]


def refresh(spark, config, now=NOW2, on_window=lambda: None, transfer_id: str = "refresh1") -> list:
    """A full refresh, ``on_window()`` called after each window has committed aside; its items."""
    return refresh_step_by_step(spark, config, now, on_window, transfer_id=transfer_id)


def primary_key(conn, schema: str) -> tuple:
    """(constraint name, its index's name, key columns) of the live table's primary key."""
    return conn.execute(
        "SELECT k.conname, (SELECT relname FROM pg_class WHERE oid = k.conindid), array_agg(a.attname::text ORDER BY a.attnum) "
        "FROM pg_constraint k JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = ANY(k.conkey) "
        "WHERE k.conrelid = %s::regclass AND k.contype = 'p' GROUP BY 1, 2", (live(schema),)).fetchone()


def assert_published(conn, pg_schema: str, dst_schema: str, transfer_id: str, watermark) -> None:
    assert destination_rows(conn, dst_schema) == source_rows(conn, pg_schema, TENANT)
    status = status_row(conn, dst_schema)
    assert status["watermark"] == watermark
    assert status["last_transfer_id"] == transfer_id
    assert ModelState.from_json(status["state"]).watermark == watermark
    assert conn.execute(f'SELECT refresh_state FROM "{dst_schema}"._transfer_status').fetchone()[0] is None
    assert not aside_tables(conn, dst_schema)
    assert not [t for t in tables_in(conn, dst_schema) if t.startswith("_tp_stg")]


def test_a_live_table_nothing_depends_on_is_replaced_by_the_aside_table(
        spark, pg_conn, pg_schema, dst_schema, backfilled):
    before, oid = destination_rows(pg_conn, dst_schema), table_oid(pg_conn, dst_schema)
    watermark_before = status_row(pg_conn, dst_schema)["watermark"]
    seen = []

    def look():
        (aside,) = aside_tables(pg_conn, dst_schema)
        seen.append((destination_rows(pg_conn, dst_schema), status_row(pg_conn, dst_schema)["watermark"],
                     table_oid(pg_conn, dst_schema), table_oid(pg_conn, dst_schema, aside)))

    items = refresh(spark, backfilled, on_window=look)

    assert len(seen) == 7  # Feb 28 .. Mar 5
    assert all(s[:3] == (before, watermark_before, oid) for s in seen)  # readers see the old table whole
    assert isinstance(items[-1], ModelState)
    assert items[-1].watermark == NOW2
    # the live table *is* the aside table now (as the last window left it: the first window with
    # rows took the empty aside table's place by the fast path): its rows were written once
    assert table_oid(pg_conn, dst_schema) == seen[-1][3] != oid
    assert_published(pg_conn, pg_schema, dst_schema, "refresh1", NOW2)
    assert primary_key(pg_conn, dst_schema) == (f"{MODEL}_pkey", f"{MODEL}_pkey", ["id"])
    assert pg_conn.execute("SELECT relpersistence FROM pg_class WHERE oid = %s::regclass",
                           (live(dst_schema),)).fetchone()[0] == "p"
    # analyzed before it was published: readers' plans have its statistics at once
    assert pg_conn.execute("SELECT count(*) FROM pg_stats WHERE schemaname = %s AND tablename = %s",
                           (dst_schema, MODEL)).fetchone()[0] == 4
    # and it behaves as the table it replaced: the key refuses a duplicate, transfers go on
    with pytest.raises(Exception, match="duplicate key value"):
        pg_conn.execute(f"INSERT INTO {live(dst_schema)} SELECT * FROM {live(dst_schema)} LIMIT 1")
    insert_rows(pg_conn, pg_schema, [(5000, TENANT, NOW2 + timedelta(hours=1), "later")])
    assert transfer(spark, backfilled, NOW3, transfer_id="t3").status == "SUCCESS"
    assert_published(pg_conn, pg_schema, dst_schema, "t3", NOW3)


def test_a_first_refresh_with_no_live_table_renames_the_aside_table_into_place(
        spark, pg_conn, pg_schema, dst_schema):
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "globex"], 12, DATA_DAYS, seed=32))
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=MIN_START)

    assert transfer(spark, config, NOW2, transfer_id="refresh1", full_refresh=True).status == "SUCCESS"

    assert_published(pg_conn, pg_schema, dst_schema, "refresh1", NOW2)
    assert primary_key(pg_conn, dst_schema)[0] == f"{MODEL}_pkey"


# what a recipient attaches to the live table, and how to see it still works after the refresh
ATTACHED = {
    "view": ('CREATE VIEW "{s}".recent AS SELECT * FROM "{s}".events WHERE id > 0',
             'SELECT id, organization_id, updated_at, payload FROM "{s}".recent'),
    "grant": ('GRANT USAGE ON SCHEMA "{s}" TO "{role}"; GRANT SELECT ON "{s}".events TO "{role}"', None),
    "foreign_key": ('CREATE TABLE "{s}".notes (event_id bigint REFERENCES "{s}".events (id), note text); '
                    'INSERT INTO "{s}".notes SELECT min(id), \'first\' FROM "{s}".events', None),
    "trigger": ('CREATE TABLE "{s}".audit (n int); '
                'CREATE FUNCTION "{s}".count_rows() RETURNS trigger LANGUAGE plpgsql AS '
                '$$BEGIN INSERT INTO "{s}".audit VALUES (1); RETURN NEW; END$$; '
                'CREATE TRIGGER events_audit AFTER INSERT ON "{s}".events FOR EACH STATEMENT '
                'EXECUTE FUNCTION "{s}".count_rows()', None),
}


@pytest.mark.parametrize("attached", sorted(ATTACHED))
def test_a_live_table_something_depends_on_keeps_its_identity(
        spark, pg_conn, pg_schema, dst_schema, backfilled, pg_role, attached):
    oid = table_oid(pg_conn, dst_schema)
    attach, through = ATTACHED[attached]
    pg_conn.execute(attach.format(s=dst_schema, role=pg_role))

    items = refresh(spark, backfilled)

    assert isinstance(items[-1], ModelState)
    assert table_oid(pg_conn, dst_schema) == oid  # the same table: its rows were replaced, not it
    assert_published(pg_conn, pg_schema, dst_schema, "refresh1", NOW2)
    expected = source_rows(pg_conn, pg_schema, TENANT)
    if attached == "view":  # the view reads the new rows
        assert normalize(pg_conn.execute(through.format(s=dst_schema)).fetchall()) == expected
    elif attached == "grant":  # the other role still reads the table
        with pg_connect(autocommit=True) as other:
            other.execute(f'SET ROLE "{pg_role}"')
            assert len(other.execute(f"SELECT * FROM {live(dst_schema)}").fetchall()) == len(expected)
    elif attached == "foreign_key":  # the key still points at the table and still holds
        (referenced,) = pg_conn.execute("SELECT confrelid::oid FROM pg_constraint WHERE conrelid = %s::regclass "
                                        "AND contype = 'f'", (f'"{dst_schema}".notes',)).fetchone()
        assert referenced == oid
        with pytest.raises(Exception, match="violates foreign key constraint"):
            pg_conn.execute(f'INSERT INTO "{dst_schema}".notes VALUES (-1, \'dangling\')')
    else:  # the trigger fired on the refill
        assert pg_conn.execute(f'SELECT count(*) FROM "{dst_schema}".audit').fetchone()[0] >= 1


def test_a_refresh_removing_a_row_a_foreign_key_still_needs_is_refused_and_publishes_nothing(
        spark, pg_conn, pg_schema, dst_schema, backfilled):
    before, oid = destination_rows(pg_conn, dst_schema), table_oid(pg_conn, dst_schema)
    status_before = status_row(pg_conn, dst_schema)
    gone = next(r[0] for r in before if r[0] not in {s[0] for s in source_rows(pg_conn, pg_schema, TENANT)})
    pg_conn.execute(f'CREATE TABLE "{dst_schema}".notes (event_id bigint REFERENCES {live(dst_schema)} (id))')
    pg_conn.execute(f'INSERT INTO "{dst_schema}".notes VALUES (%s)', (gone,))

    with pytest.raises(DataError, match=f"still references.*{gone}"):
        refresh(spark, backfilled)

    assert table_oid(pg_conn, dst_schema) == oid
    assert destination_rows(pg_conn, dst_schema) == before
    assert status_row(pg_conn, dst_schema) == status_before
    assert len(aside_tables(pg_conn, dst_schema)) == 1  # kept: the next transfer publishes it


def fail_after_the_drop(monkeypatch) -> None:
    original = PostgresWriter._rename_into

    def rename_into(self, table, name):
        if name == MODEL:  # the publish (a window's fast path renames a staging table aside)
            dropped = self.conn.execute("SELECT to_regclass(%s) IS NULL", (f'"{self.schema}"."{MODEL}"',)).fetchone()[0]
            assert dropped, "the injection is meant to land after the live table was dropped"
            raise RuntimeError("injected: the process dies after the live table was dropped")
        original(self, table, name)
    monkeypatch.setattr(PostgresWriter, "_rename_into", rename_into)


def fail_before_the_commit(monkeypatch) -> None:
    original = PostgresWriter._record_state

    def record_state(self, model, state, transfer_id):
        original(self, model, state, transfer_id)
        raise RuntimeError("injected: the process dies before the publish commits")
    monkeypatch.setattr(PostgresWriter, "_record_state", record_state)


@pytest.mark.parametrize(("path", "inject"), [
    ("swap", fail_after_the_drop),
    ("swap", fail_before_the_commit),
    ("copy", fail_before_the_commit),
], ids=["swap-after-drop", "swap-before-commit", "copy-before-commit"])
def test_a_failure_before_the_publish_commits_leaves_the_live_table_as_it_was(
        spark, pg_conn, pg_schema, dst_schema, backfilled, monkeypatch, path, inject):
    if path == "copy":
        pg_conn.execute(f'CREATE VIEW "{dst_schema}".recent AS SELECT id FROM {live(dst_schema)}')
    before, oid = destination_rows(pg_conn, dst_schema), table_oid(pg_conn, dst_schema)
    status_before = status_row(pg_conn, dst_schema)
    with monkeypatch.context() as patched:
        inject(patched)
        with pytest.raises(RuntimeError, match="injected"):
            refresh(spark, backfilled)

    assert table_oid(pg_conn, dst_schema) == oid
    assert destination_rows(pg_conn, dst_schema) == before
    assert primary_key(pg_conn, dst_schema)[0] == f"{MODEL}_pkey"
    assert status_row(pg_conn, dst_schema) == status_before
    (pending,) = pg_conn.execute(f'SELECT refresh_state::text FROM "{dst_schema}"._transfer_status').fetchone()
    assert ModelState.from_json(pending).watermark == NOW2  # loaded, kept aside
    assert len(aside_tables(pg_conn, dst_schema)) == 1

    resumed = transfer(spark, backfilled, NOW3, transfer_id="t3")  # a plain transfer publishes it
    assert resumed.status == "SUCCESS", resumed.error
    assert_published(pg_conn, pg_schema, dst_schema, "t3", NOW3)
    assert (table_oid(pg_conn, dst_schema) == oid) == (path == "copy")


def test_readers_holding_the_live_table_make_the_publish_wait_at_most_the_lock_timeout(
        spark, pg_conn, pg_schema, dst_schema, backfilled, monkeypatch):
    before, oid = destination_rows(pg_conn, dst_schema), table_oid(pg_conn, dst_schema)
    status_before = status_row(pg_conn, dst_schema)
    with pg_connect() as reader:  # a long query of the recipient's, in its transaction
        reader.execute(f"SELECT count(*) FROM {live(dst_schema)}").fetchone()
        refused = transfer(spark, backfilled, NOW2, transfer_id="refresh1", full_refresh=True,
                           tuning=Tuning(lock_wait_seconds=1))
        reader.rollback()

    assert refused.status == "ERROR"
    assert refused.error_type == "TransferRunning"
    assert "was not published" in refused.error
    assert "for 1 s" in refused.error
    assert table_oid(pg_conn, dst_schema) == oid
    assert destination_rows(pg_conn, dst_schema) == before
    assert status_row(pg_conn, dst_schema) == status_before
    assert len(aside_tables(pg_conn, dst_schema)) == 1

    resumed = transfer(spark, backfilled, NOW3, transfer_id="t3")
    assert resumed.status == "SUCCESS", resumed.error
    assert_published(pg_conn, pg_schema, dst_schema, "t3", NOW3)
