"""The Snowflake dialect's statements as text, without a server: names in full and quoted, the
merge's tie-break, JSON parsed from the staged text, the stage's load, the lock's claim."""

from __future__ import annotations

from transfer_platform.config.models import ColumnConfig, ModelConfig
from transfer_platform.destinations.snowflake.dialect import SnowflakeDialect

D = SnowflakeDialect("ACME")


def model(*, append_only: bool = False) -> ModelConfig:
    return ModelConfig(model_name="events", source_name="src", source_table="t", is_append_only=append_only, columns=[
        ColumnConfig(name_in_source="id", data_type="integer", is_primary_key=True),
        ColumnConfig(name_in_source="updated_at", data_type="timestamp", is_last_modified=True),
        ColumnConfig(name_in_source="deleted", data_type="boolean", is_deleted_marker=True),
        ColumnConfig(name_in_source="doc", data_type="json")])


def test_tables_are_named_in_full_and_quoted() -> None:
    assert D.qualified("recipient", "events") == '"ACME"."recipient"."events"'
    text, params = D.table_exists("recipient", "events")
    assert text.startswith('SELECT count(*) > 0 FROM "ACME".INFORMATION_SCHEMA.TABLES')
    assert params == ("recipient", "events")


def test_the_merge_replaces_a_row_only_when_later_or_as_late_and_different() -> None:
    update, insert = D.upsert('"t"', '"s"', model(), None)
    assert update.startswith('UPDATE "t" AS t SET ')
    assert 's."updated_at" > t."updated_at" OR (s."updated_at" = t."updated_at" AND (' in update
    assert 't."deleted" IS DISTINCT FROM s."deleted"' in update
    assert 't."doc" IS DISTINCT FROM PARSE_JSON(s."doc")' in update
    assert '"doc" = PARSE_JSON(s."doc")' in update
    assert insert.startswith('INSERT INTO "t" ("id", "updated_at", "deleted", "doc") SELECT s."id"')
    assert 'WHERE NOT EXISTS (SELECT 1 FROM "t" AS t WHERE t."id" = s."id")' in insert


def test_an_append_only_model_only_inserts_and_skipped_rows_stay_out() -> None:
    (insert,) = D.upsert('"t"', '"s"', model(append_only=True), D.marked("deleted", "boolean"))
    assert insert.startswith('INSERT INTO "t"')
    assert 'FROM (SELECT * FROM "s" WHERE NOT (COALESCE("deleted", FALSE))) AS s' in insert


def test_a_soft_delete_wins_at_the_same_last_modified_value() -> None:
    text = D.soft_delete('"t"', '"s"', model())
    assert 'COALESCE(s."deleted", FALSE)' in text
    assert text.endswith('AND s."updated_at" >= t."updated_at"')


def test_json_is_staged_as_text_and_the_load_matches_columns_by_name() -> None:
    ddl = D.staging_ddl('"s"', '"t"', model(), None, logged=False)
    assert ddl.startswith("CREATE TRANSIENT TABLE")
    assert '"doc" VARCHAR' in ddl
    assert D.put("/tmp/it's.parquet", '"ACME"."r"."_tp_stage"', "w/1") == (
        "PUT 'file:///tmp/it\\'s.parquet' @\"ACME\".\"r\".\"_tp_stage\"/w/1/ AUTO_COMPRESS=FALSE OVERWRITE=TRUE "
        "PARALLEL=4")
    copy = D.copy_into('"s"', "@st", "w/1")
    assert "MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE" in copy
    assert "PURGE = TRUE" in copy


def test_the_lock_is_claimed_only_when_free_ours_or_expired() -> None:
    text, params = D.claim_lock('"l"', "events", "me", 30)
    assert "DATEADD(second, 30, CURRENT_TIMESTAMP())" in text
    assert "(holder IS NULL OR holder = %s OR expires_at < CURRENT_TIMESTAMP())" in text
    assert params == ("me", "events", "me")
    text, params = D.renew_lock('"l"', "events", "me", 30)
    assert text.endswith("WHERE data_model_name = %s AND holder = %s")
    assert D.matches("VARCHAR", "TEXT")
    assert D.matches("NUMBER(38,9)", "NUMBER(38,9)")
    assert not D.matches("NUMBER(38,0)", "NUMBER(38,9)")
