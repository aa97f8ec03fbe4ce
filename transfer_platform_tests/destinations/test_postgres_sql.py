"""The PostgreSQL destination's SQL text, without a database."""

from __future__ import annotations

from transfer_platform.config.models import ColumnConfig, ModelConfig
from transfer_platform.destinations.postgres import dialect as sql
from transfer_platform.destinations.postgres.dialect import (
    PostgresDialect,
    model_lock_key,
    probe_steps,
)

PG = PostgresDialect()


def model(*extra: ColumnConfig) -> ModelConfig:
    return ModelConfig(model_name="events", source_name="src", source_table="events", columns=[
        ColumnConfig(name_in_source="id", data_type="integer", is_primary_key=True),
        ColumnConfig(name_in_source="org", data_type="string", is_primary_key=True),
        ColumnConfig(name_in_source="updated_at", data_type="timestamp", is_last_modified=True),
        ColumnConfig(name_in_source='pay"load', data_type="json"), *extra])


def test_target_and_status_tables():
    assert PG.target_ddl('"s"."events"', model()) == (
        'CREATE TABLE IF NOT EXISTS "s"."events" ("id" bigint, "org" text, "updated_at" timestamp with '
        'time zone, "pay""load" jsonb, PRIMARY KEY ("id", "org"))')
    assert PG.status_ddl('"s"."_transfer_status"').startswith(
        'CREATE TABLE IF NOT EXISTS "s"."_transfer_status" (data_model_name text PRIMARY KEY, ')


def test_the_lock_key_is_a_stable_signed_64_bit_integer_per_database_schema_and_model():
    key = model_lock_key("test", "s", "events")
    assert key == model_lock_key("test", "s", "events")
    assert -(2 ** 63) <= key < 2 ** 63
    assert len({key, model_lock_key("test", "s", "other"), model_lock_key("test", "t", "events"),
                model_lock_key("prod", "s", "events")}) == 4


def test_the_batch_summary_counts_marked_rows_only_with_a_marker():
    plain, params = PG.batch_summary(model(), '"s"."stg"', None)
    assert 'count(*) FILTER (WHERE "id" IS NULL OR "org" IS NULL)' in plain
    assert "count(*) FILTER (WHERE false AND" in plain
    marked, _ = PG.batch_summary(model(ColumnConfig(name_in_source="deleted_at", data_type="timestamp",
                                                  is_deleted_marker=True)), '"s"."stg"', None)
    assert 'count(*) FILTER (WHERE "deleted_at" IS NOT NULL AND ("updated_at" > %(hw)s OR %(hw)s IS NULL))' in marked


def test_rows_are_deleted_only_where_every_column_matches():
    assert PG.delete_matching('"s"."t"', '"s"."stg"', ["id", "updated_at"]) == (
        'DELETE FROM "s"."t" AS t USING "s"."stg" AS s WHERE t."id" = s."id" AND t."updated_at" = s."updated_at"')


def test_probe_steps_undo_what_they_do_in_order():
    steps = probe_steps("s", "_tp_probe_x")
    assert [name.split(" ")[0] for name, _ in steps] == ["create", "create", "insert,", "add", "rename", "drop"]
    statements = [sql for _, group in steps for sql in group]
    assert statements[-2:] == ['DROP TABLE "s"."_tp_probe_x_r"', 'DROP TABLE "s"."_tp_probe_x_s"']


def test_every_name_is_quoted_and_no_value_is_inlined():
    """Identifiers from the configuration may hold quotes: each statement quotes them; values
    (states, model names) are always parameters."""
    status, live, aside = '"s"."_transfer_status"', '"s"."ev""ents"', '"s"."_tp_refresh_x"'
    assert sql.create_schema('pro"vider') == 'CREATE SCHEMA "pro""vider"'
    assert sql.copy_into_live(live, aside, ["id", 'pay"load']) == [
        'TRUNCATE "s"."ev""ents"',
        'INSERT INTO "s"."ev""ents" ("id", "pay""load") SELECT "id", "pay""load" FROM "s"."_tp_refresh_x"',
        'DROP TABLE "s"."_tp_refresh_x"']
    columns = [ColumnConfig(name_in_source="id", data_type="integer"),
               ColumnConfig(name_in_source='u"t', data_type="timestamp")]
    assert PG.staging_ddl('"s"."st"', live, model(), columns, logged=False) == (
        'CREATE UNLOGGED TABLE "s"."st" AS SELECT "id", "u""t" FROM "s"."ev""ents" WITH NO DATA')
    assert PG.staging_ddl('"s"."st"', live, model(), None, logged=True) == (
        'CREATE TABLE "s"."st" AS SELECT * FROM "s"."ev""ents" WITH NO DATA')
    assert sql.copy_csv('"s"."st"', ['a"b']) == 'COPY "s"."st" ("a""b") FROM STDIN (FORMAT csv)'
    assert PG.alter_columns(live, [ColumnConfig(name_in_source='n"ew', data_type="string")], ["old"]) == [
        'ALTER TABLE "s"."ev""ents" ADD COLUMN "n""ew" text', 'ALTER TABLE "s"."ev""ents" DROP COLUMN "old"']
    assert sql.rename_constraint(live, "a_pkey", 'ev"ents_pkey') == (
        'ALTER TABLE "s"."ev""ents" RENAME CONSTRAINT "a_pkey" TO "ev""ents_pkey"')
    assert PG.first_duplicate_key('"s"."st"', ["id", "org"]) == (
        'SELECT "id", "org", count(*) FROM "s"."st" GROUP BY "id", "org" HAVING count(*) > 1 LIMIT 1')
    assert PG.first_key_where_null('"s"."st"', ["id"], 'up"d') == (
        'SELECT "id" FROM "s"."st" WHERE "up""d" IS NULL LIMIT 1')
    assert sql.not_owned(3).count("to_regclass(%s)") == 3
    assert PG.read_state(status, "refresh_state", "events", for_update=True) == (
        'SELECT refresh_state::text FROM "s"."_transfer_status" WHERE data_model_name = %s FOR UPDATE',
        ("events",))
    text, params = PG.record_state(status, "events", None, None, "{}", "t1")
    assert text.count("%s") == len(params) == 5
    text, params = PG.set_state_column(status, "refresh_state", "events", "{}")
    assert text.count("%s") == len(params) == 2
    for text, params in (PG.read_state(status, "state", "events"), PG.ensure_status_row(status, "events"),
                         PG.set_state_column(status, "refresh_state", "events", None)):
        assert "events" not in text  # the model name is a parameter
        assert "events" in params


def test_a_state_column_other_than_the_two_is_refused():
    import pytest

    with pytest.raises(ValueError, match="not a state column"):
        PG.read_state('"s"."_transfer_status"', "state; DROP TABLE x", "events")


def test_publishing_a_refresh_by_swap_locks_both_tables_and_analyzes_the_aside_one():
    assert sql.lock_exclusive('"s"."ev""ents"') == 'LOCK TABLE "s"."ev""ents" IN ACCESS EXCLUSIVE MODE'
    assert sql.lock_exclusive('"s"."ev""ents"', '"s"."_tp_refresh_x"') == (
        'LOCK TABLE "s"."ev""ents", "s"."_tp_refresh_x" IN ACCESS EXCLUSIVE MODE')
    assert sql.analyze('"s"."_tp_refresh_x"') == 'ANALYZE "s"."_tp_refresh_x"'
    # the identity checks take both tables as parameters, never inlined
    for text in (sql.SAME_OWNER_GRANTS_AND_OPTIONS, sql.SAME_COLUMNS, sql.SAME_PRIMARY_KEY):
        assert text.count("%s::regclass") == 2
    assert sql.REFERENCED_BY_ANOTHER_TABLE.count("%s") == 1
    assert "%(t)s" in sql.DEPENDENTS_BUT_THE_KEY


def test_a_refresh_into_a_table_a_foreign_key_references_is_merged_not_truncated():
    live, aside = '"s"."ev""ents"', '"s"."_tp_refresh_x"'
    assert sql.merge_into_live(live, aside, ["id", "org", 'pay"load'], ["id", "org"]) == [
        'DELETE FROM "s"."ev""ents" AS t WHERE NOT EXISTS (SELECT FROM "s"."_tp_refresh_x" AS a '
        'WHERE a."id" = t."id" AND a."org" = t."org")',
        'INSERT INTO "s"."ev""ents" AS t ("id", "org", "pay""load") SELECT "id", "org", "pay""load" '
        'FROM "s"."_tp_refresh_x" ON CONFLICT ("id", "org") DO UPDATE SET "pay""load" = EXCLUDED."pay""load" '
        'WHERE ROW(t."pay""load") IS DISTINCT FROM ROW(EXCLUDED."pay""load")',
        'DROP TABLE "s"."_tp_refresh_x"']
    only_key = sql.merge_into_live(live, aside, ["id"], ["id"])
    assert only_key[1].endswith('ON CONFLICT ("id") DO NOTHING')
    assert "TRUNCATE" not in " ".join(only_key)
