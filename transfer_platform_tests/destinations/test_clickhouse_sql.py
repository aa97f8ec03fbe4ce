"""The ClickHouse destination's SQL text, planned without a server: names quoted and read back, a
model's table (a ReplacingMergeTree versioned by the last-modified column, the key and that column
not Nullable), the window's insert into the clone (soft deletes as ``_tp_deleted`` rows, an
append-only model's new keys only) and the state view."""

from __future__ import annotations

from datetime import UTC, datetime

from transfer_platform.config.parsing import parse_config
from transfer_platform.destinations.clickhouse.dialect import (
    ClickhouseDialect,
    literal,
    split_qualified,
)

COLUMNS = [
    {"name_in_source": "code", "data_type": "string", "is_primary_key": True},
    {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
    {"name_in_source": "note", "data_type": "string"},
    {"name_in_source": "gone", "data_type": "boolean", "is_deleted_marker": True},
]

D = ClickhouseDialect()


def model(columns=COLUMNS, **settings):
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres",
                     "connection": {"host": "h", "port": 5432, "database": "d", "username": "u"}}],
        "models": [{"model_name": "events", "source_name": "src", "source_table": "t", "organization_column": "o",
                    "min_start_time_epoch": 1700000000, "columns": columns, **settings}],
        "recipients": [], "destinations": []}, now=datetime(2025, 1, 1, tzinfo=UTC)).models[0]


def test_names_with_quotes_and_backticks_are_quoted_and_read_back() -> None:
    name = D.qualified("o'neil`s \\ db", "t`x")
    assert name == "`o'neil\\`s \\\\ db`.`t\\`x`"
    assert split_qualified(name) == ("o'neil`s \\ db", "t`x")
    assert literal("it's \\") == "'it\\'s \\\\'"


def test_a_models_table_is_a_replacing_merge_tree_of_its_key_versioned_by_its_last_modified_column() -> None:
    ddl = D.target_ddl("`d`.`events`", model())
    assert ddl == ("CREATE TABLE IF NOT EXISTS `d`.`events` (`code` String, `updated_at` DateTime64(6, 'UTC'), "
                   "`note` Nullable(String), `gone` Nullable(Bool), `_tp_deleted` UInt8 DEFAULT 0) "
                   "ENGINE = ReplacingMergeTree(`updated_at`, `_tp_deleted`) ORDER BY (`code`)")
    assert D.matches("Nullable(DateTime64(6, 'UTC'))", "DateTime64(6,'UTC')")
    assert not D.matches("Int64", "String")


def test_the_windows_insert_marks_deletes_and_an_append_only_model_inserts_new_keys_only() -> None:
    columns = ["code", "updated_at", "note", "gone"]
    insert = D.window_insert("`d`.`c`", "`d`.`s`", "`d`.`events`", model(), columns)
    assert insert.endswith("toUInt8(coalesce(`gone`, false)) FROM `d`.`s`")
    assert "assumeNotNull(`code`), assumeNotNull(`updated_at`), `note`" in insert
    kept = D.window_insert("`d`.`c`", "`d`.`s`", "`d`.`events`", model(keep_deleted_rows=True), columns)
    assert kept.endswith(", 0 FROM `d`.`s`")
    appended = D.window_insert("`d`.`c`", "`d`.`s`", "`d`.`events`", model(COLUMNS[:3], is_append_only=True),
                               columns[:3])
    assert appended.endswith("WHERE (`code`) NOT IN (SELECT `code` FROM `d`.`events` FINAL)")


def test_the_status_view_reads_the_model_tables_comments_of_its_own_database_only() -> None:
    ddl = D.status_ddl("`o'b`.`_transfer_status`")
    assert "FROM system.tables WHERE database = 'o\\'b'" in ddl
    assert "NOT startsWith(name, '_tp_')" in ddl


def test_a_refused_right_names_the_grant_clickhouse_asks_for_without_the_password() -> None:
    from clickhouse_connect.driver.exceptions import DatabaseError

    from transfer_platform.destinations.clickhouse.session import missing_privilege
    from transfer_platform.vendors.clickhouse import ClickhouseDestination

    destination = ClickhouseDestination.model_validate({
        "name": "acme_ch", "recipient": "acme", "vendor": "clickhouse",
        "connection": {"host": "h", "database": "analytics", "username": "tp_loader", "password": "${PW}"}})
    text = ("HTTPDriver for http://h:8123 received ClickHouse error code 497\n Code: 497. DB::Exception: tp_loader: "
            "Not enough privileges. To execute this query, it's necessary to have the grant ALTER ATTACH PARTITION "
            "ON analytics.events. (ACCESS_DENIED) (version 25.8.1.1)")
    refused = missing_privilege(destination, "ClickHouse destination 'acme_ch'", DatabaseError(text))
    assert refused.grant == "GRANT ALTER ATTACH PARTITION ON analytics.events TO `tp_loader`"
    assert str(refused).startswith("ClickHouse destination 'acme_ch': role 'tp_loader' may not")
