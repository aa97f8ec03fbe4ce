"""The MySQL destination's SQL text, planned without a database: the types a table is created
with (a string key bounded, the rest the vendor record's), the read-back comparison that schema
evolution relies on, and the merge's tie-break."""

from __future__ import annotations

from datetime import UTC, datetime

from transfer_platform.config.parsing import parse_config
from transfer_platform.destinations.mysql import dialect as sql
from transfer_platform.vendors import DESTINATIONS

COLUMNS = [
    {"name_in_source": "code", "data_type": "string", "is_primary_key": True},
    {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
    {"name_in_source": "note", "data_type": "string"},
    {"name_in_source": "amount", "data_type": "decimal"},
]


def model():
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres",
                     "connection": {"host": "h", "port": 5432, "database": "d", "username": "u"}}],
        "models": [{"model_name": "events", "source_name": "src", "source_table": "t", "organization_column": "o",
                    "min_start_time_epoch": 1700000000, "columns": COLUMNS}],
        "recipients": [], "destinations": []}, now=datetime(2025, 1, 1, tzinfo=UTC)).models[0]


def test_a_string_key_is_a_bounded_varchar_and_other_columns_take_the_vendor_records_types() -> None:
    ddl = sql.MysqlDialect().target_ddl(sql.qualified("d`b", "events"), model())
    assert ddl == ("CREATE TABLE IF NOT EXISTS `d``b`.`events` (`code` VARCHAR(255), `updated_at` DATETIME(6), "
                   "`note` LONGTEXT, `amount` DECIMAL(38,9), PRIMARY KEY (`code`)) " + sql.TABLE_OPTIONS)
    assert set(DESTINATIONS["mysql"].column_types) == {"string", "integer", "float", "boolean", "timestamp",
                                                       "date", "decimal", "json"}


def test_types_read_back_from_mysql_and_mariadb_match_and_a_change_does_not() -> None:
    assert sql.matches("BIGINT", "bigint(20)")
    assert sql.matches("BIGINT", "bigint")
    assert sql.matches("JSON", "longtext")
    assert sql.matches("DATETIME(6)", "datetime(6)")
    assert not sql.matches("DATETIME(6)", "datetime")
    assert not sql.matches("BIGINT", "double")
    assert not sql.matches("LONGTEXT", "varchar(255)")


def test_a_staged_row_replaces_a_target_row_only_when_newer_or_equally_new_and_different() -> None:
    text = sql.replaced_rows("`db`.`t`", "`db`.`s`", ["code", "updated_at", "note"], ["code"], "updated_at")
    assert text == ("DELETE t FROM `db`.`t` AS t JOIN `db`.`s` AS s ON t.`code` = s.`code` "
                    "WHERE s.`updated_at` > t.`updated_at` OR (s.`updated_at` = t.`updated_at` "
                    "AND NOT (t.`note` <=> s.`note`))")


def test_lock_names_are_per_database_and_model_and_fit_mysqls_limit() -> None:
    names = {sql.model_lock_name(d, m) for d in ("a", "b") for m in ("x", "y")}
    assert len(names) == 4
    assert all(len(n) <= 64 for n in names)
