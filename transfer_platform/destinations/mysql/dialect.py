"""The MySQL / MariaDB destination's SQL text, planned without a database: :class:`MysqlDialect`."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from transfer_platform.core.sql import quote_ident
from transfer_platform.destinations.sql.dialect import Dialect, Statement, StatusTypes
from transfer_platform.vendors import DESTINATIONS
from transfer_platform.vendors.mysql import SQL_TEXT

if TYPE_CHECKING:
    from transfer_platform.config.models import ColumnConfig, ModelConfig

#: MySQL cannot index a LONGTEXT without a prefix: a string key column is a VARCHAR
KEY_STRING_LENGTH = 255
KEY_STRING_TYPE = f"VARCHAR({KEY_STRING_LENGTH})"
#: every table's character set and collation: UTF-8 in full, keys compared byte for byte
TABLE_OPTIONS = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
#: the earliest value DATETIME and DATE are documented to hold
EARLIEST = "1000-01-01"
#: the session's settings: UTC, and values a column cannot hold refused rather than bent
SESSION_SETUP = ("SET time_zone = '+00:00', sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
                 "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'")
#: a type's ``COLUMN_TYPE`` where it differs (MariaDB keeps integers' display width; its JSON is a LONGTEXT)
_READ_BACK = {"BIGINT": ("bigint", "bigint(20)"), "BOOLEAN": ("tinyint(1)",), "JSON": ("json", "longtext")}
_IN_TABLE = "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"


def q(name: str) -> str:
    return quote_ident(name, SQL_TEXT)


def names(columns: Sequence[str], prefix: str = "") -> str:
    return ", ".join(prefix + q(c) for c in columns)


def _join(keys: Sequence[str]) -> str:
    return " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in keys)


def model_lock_name(database: str, model: str) -> str:
    """The ``GET_LOCK`` name of one model in one destination database (at most 64 characters)."""
    return "tp_model_" + hashlib.sha256(f"transfer_platform\x00{database}\x00{model}".encode()).hexdigest()[:40]


def load_data(staging: str, path: str, columns: list[str]) -> str:
    return (f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE {staging} CHARACTER SET utf8mb4 "
            "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '\\\\' "
            f"LINES TERMINATED BY '\\n' ({names(columns)})")


def replaced_rows(target: str, staging: str, columns: Sequence[str], keys: Sequence[str],
                  last_modified: str) -> str:
    """Delete the target rows a newer staged row replaces, or an equally new one that differs."""
    lm = q(last_modified)
    same = " AND ".join(f"t.{q(c)} <=> s.{q(c)}" for c in columns if c not in keys and c != last_modified)
    condition = f"s.{lm} > t.{lm}" + (f" OR (s.{lm} = t.{lm} AND NOT ({same}))" if same else "")
    return f"DELETE t FROM {target} AS t JOIN {staging} AS s ON {_join(keys)} WHERE {condition}"


class MysqlDialect(Dialect):
    vendor = "mysql"
    status_types = StatusTypes("VARCHAR(255) NOT NULL PRIMARY KEY", "DATETIME(6) NULL", "LONGTEXT NULL",
                               "VARCHAR(255) NULL", "DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
                               options=f" {TABLE_OPTIONS}")
    transactional_ddl = False  # DDL commits: a refresh is published by one RENAME TABLE between two commits
    now = "CURRENT_TIMESTAMP(6)"

    def quote(self, name: str) -> str:
        return q(name)

    def column_type(self, column: ColumnConfig) -> str:
        return KEY_STRING_TYPE if column.is_primary_key and column.data_type == "string" else super().column_type(column)

    def matches(self, declared: str, actual: str) -> bool:
        return actual.lower() in _READ_BACK.get(declared, (declared.lower(),))

    def table_exists(self, container: str, name: str) -> Statement:
        return f"SELECT count(*) FROM information_schema.TABLES {_IN_TABLE}", (container, name)

    def columns(self, container: str, name: str) -> Statement:
        return (f"SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS {_IN_TABLE} "
                "ORDER BY ORDINAL_POSITION", (container, name))

    def primary_key(self, container: str, name: str) -> Statement:
        return (f"SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE {_IN_TABLE} "
                "AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY COLUMN_NAME", (container, name))

    def tables_starting_with(self, container: str, prefix: str) -> Statement:
        return ("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                "AND LEFT(TABLE_NAME, CHAR_LENGTH(%s)) = %s", (container, prefix, prefix))

    def table_size(self, container: str, name: str) -> Statement:
        return (f"SELECT COALESCE(DATA_LENGTH + INDEX_LENGTH, 0) FROM information_schema.TABLES {_IN_TABLE}",
                (container, name))

    def dependents(self, container: str, name: str) -> Statement:
        return ("SELECT (SELECT count(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = %s AND "
                "EVENT_OBJECT_TABLE = %s) + (SELECT count(*) FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE "
                "(CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s) OR (UNIQUE_CONSTRAINT_SCHEMA = %s AND "
                "REFERENCED_TABLE_NAME = %s))", (container, name) * 3)

    def target_ddl(self, table: str, model: ModelConfig) -> str:
        return f"{super().target_ddl(table, model)} {TABLE_OPTIONS}"

    def staging_ddl(self, staging: str, target: str, model: ModelConfig, columns: Sequence[ColumnConfig] | None,
                    *, logged: bool) -> str:
        """Nullable, no key; a string key a ``LONGTEXT``, so that a key too long is refused by name."""
        types = DESTINATIONS["mysql"].column_types
        cols = ", ".join(f"{q(c.destination_name)} {types[c.data_type]} NULL" for c in (columns or model.columns))
        return f"CREATE TABLE {staging} ({cols}) {TABLE_OPTIONS}"

    def alter_columns(self, table: str, added: Sequence[ColumnConfig], dropped: Sequence[str]) -> list[str]:
        """One ``ALTER TABLE``: DDL is not transactional, one statement makes all its changes or none."""
        clauses = [f"ADD COLUMN {q(c.destination_name)} {self.column_type(c)} NULL" for c in added]
        clauses += [f"DROP COLUMN {q(name)}" for name in dropped]
        return [f"ALTER TABLE {table} {', '.join(clauses)}"] if clauses else []

    def rename_tables(self, container: str, pairs: Sequence[tuple[str, str]]) -> list[str]:
        return ["RENAME TABLE " + ", ".join(f"{a} TO {qualified(container, b)}" for a, b in pairs)]

    def ensure_status_row(self, status: str, model_name: str) -> Statement:
        return f"INSERT IGNORE INTO {status} (data_model_name) VALUES (%s)", (model_name,)

    def count_where(self, condition: str) -> str:
        return f"COALESCE(SUM({condition}), 0)"

    def soft_delete(self, target: str, staging: str, model: ModelConfig) -> str:
        lm, marker = q(model.last_modified.destination_name), model.deletion_marker
        keys = [c.destination_name for c in model.primary_key]
        return (f"DELETE t FROM {target} AS t JOIN {staging} AS s ON {_join(keys)} "
                f"WHERE {self.marked(marker.destination_name, marker.data_type, 's')} AND s.{lm} >= t.{lm}")

    def upsert(self, target: str, staging: str, model: ModelConfig, skip: str | None) -> list[str]:
        """A staged delete + insert (``INSERT ... ON DUPLICATE KEY UPDATE`` was not used: each of
        its assignments sees the columns already assigned before it, so the tie-break on the
        last-modified column would have to be assigned last and repeated in every assignment)."""
        keys = [c.destination_name for c in model.primary_key]
        columns = [c.destination_name for c in model.columns]
        where = f"NOT EXISTS (SELECT 1 FROM {target} AS t WHERE {_join(keys)})" + (f" AND NOT ({skip})" if skip else "")
        replaced = [] if model.is_append_only else [
            replaced_rows(target, staging, columns, keys, model.last_modified.destination_name)]
        return [*replaced, f"INSERT INTO {target} ({names(columns)}) SELECT {names(columns, 's.')} "
                           f"FROM {staging} AS s WHERE {where}"]

    def delete_matching(self, target: str, staging: str, columns: Sequence[str]) -> str:
        return f"DELETE t FROM {target} AS t JOIN {staging} AS s ON {_join(columns)}"

    # -- MySQL's own: a held key staged twice, a value out of range, the key of a duplicate entry ----

    def first_duplicate_held_key(self, staging: str, target: str, keys: list[str]) -> str:
        return (f"SELECT {names(keys, 's.')}, count(*) FROM {staging} AS s JOIN {target} AS t ON {_join(keys)} "
                f"GROUP BY {names(keys, 's.')} HAVING count(*) > 1 LIMIT 1")

    def first_out_of_range(self, staging: str, keys: list[str], columns: list[str]) -> str:
        where = " OR ".join(f"{q(c)} < '{EARLIEST}'" for c in columns)
        return f"SELECT {names(keys)}, {names(columns)} FROM {staging} WHERE {where} LIMIT 1"

    def first_long_key(self, staging: str, keys: list[str], string_keys: list[str]) -> str:
        where = " OR ".join(f"CHAR_LENGTH({q(k)}) > {KEY_STRING_LENGTH}" for k in string_keys)
        return f"SELECT {', '.join(f'LEFT({q(k)}, 40)' for k in keys)} FROM {staging} WHERE {where} LIMIT 1"

    def key_by_text(self, table: str, keys: list[str]) -> str:
        return f"SELECT {names(keys)} FROM {table} WHERE CONCAT_WS('-', {names(keys)}) = %s LIMIT 1"


qualified, matches = MysqlDialect().qualified, MysqlDialect().matches  # as the tests and the probe call them
