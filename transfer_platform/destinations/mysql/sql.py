"""The SQL text of the MySQL / MariaDB destination, planned without a database, and the names of
the tables it keeps beside the models' (status, staging, refresh built aside, the old table a
publish renames away).

Every table lives in the destination's one database (``connection.database``, the recipient's);
names are quoted with backticks here. Column types come from the vendor record
(``vendors.DESTINATIONS["mysql"].column_types``), but for a string primary-key column: MySQL
cannot index a ``LONGTEXT`` without a prefix, so a string key is ``VARCHAR(255)``
(:data:`KEY_STRING_TYPE`) and a longer key value is refused by name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from transfer_platform.config.models import ColumnConfig, ModelConfig
from transfer_platform.core.sql import quote_ident
from transfer_platform.vendors import DESTINATIONS

STATUS_TABLE = "_transfer_status"
STAGING_PREFIX = "_tp_stg_"
REFRESH_PREFIX = "_tp_refresh_"
OLD_PREFIX = "_tp_old_"
#: the type of a string primary-key column (an index needs a bounded length), and that length
KEY_STRING_LENGTH = 255
KEY_STRING_TYPE = f"VARCHAR({KEY_STRING_LENGTH})"
#: every table's character set and collation: UTF-8 in full, keys compared byte for byte
TABLE_OPTIONS = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
#: the earliest value DATETIME and DATE are documented to hold
EARLIEST = "1000-01-01"
#: the session's settings: UTC, and values a column cannot hold refused rather than bent
SESSION_SETUP = ("SET time_zone = '+00:00', sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
                 "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'")


def q(name: str) -> str:
    return quote_ident(name, "mysql")


def qualified(database: str, table: str) -> str:
    return f"{q(database)}.{q(table)}"


def column_type(column: ColumnConfig) -> str:
    """The MySQL type of a model column: the vendor record's, ``VARCHAR(255)`` for a string key."""
    if column.is_primary_key and column.data_type == "string":
        return KEY_STRING_TYPE
    return DESTINATIONS["mysql"].column_types[column.data_type]


#: the ``information_schema.COLUMNS.COLUMN_TYPE`` each type is read back as (MySQL 8 drops the
#: display width of integers, MariaDB keeps it; MariaDB's JSON is a LONGTEXT with a check)
_READ_BACK = {"BIGINT": ("bigint", "bigint(20)"), "DOUBLE": ("double",), "BOOLEAN": ("tinyint(1)",),
              "DATETIME(6)": ("datetime(6)",), "DATE": ("date",), "DECIMAL(38,9)": ("decimal(38,9)",),
              "LONGTEXT": ("longtext",), "JSON": ("json", "longtext"), KEY_STRING_TYPE: ("varchar(255)",)}


def matches(declared: str, actual: str) -> bool:
    """Whether a column read back as ``actual`` (``COLUMN_TYPE``) is of the type ``declared``."""
    return actual.lower() in _READ_BACK.get(declared, (declared.lower(),))


def columns_ddl(model: ModelConfig, *, nullable: bool = False) -> str:
    return ", ".join(f"{q(c.destination_name)} {column_type(c)}{' NULL' if nullable else ''}" for c in model.columns)


def target_ddl(table: str, model: ModelConfig) -> str:
    key = ", ".join(q(c.destination_name) for c in model.primary_key)
    return f"CREATE TABLE IF NOT EXISTS {table} ({columns_ddl(model)}, PRIMARY KEY ({key})) {TABLE_OPTIONS}"


def staging_ddl(table: str, model: ModelConfig, columns: Sequence[ColumnConfig] | None = None) -> str:
    """A staging table: the model's columns (or ``columns``), every one nullable, no key (a NULL
    or duplicate key is refused by our checks, by name); a string key unbounded (``LONGTEXT``),
    so that a value too long for the target's key column is seen whole and refused by name."""
    types = DESTINATIONS["mysql"].column_types
    cols = ", ".join(f"{q(c.destination_name)} {types[c.data_type]} NULL" for c in (columns or model.columns))
    return f"CREATE TABLE {table} ({cols}) {TABLE_OPTIONS}"


def model_lock_name(database: str, model: str) -> str:
    """The ``GET_LOCK`` name of one model in one destination database (at most 64 characters)."""
    digest = hashlib.sha256(f"transfer_platform\x00{database}\x00{model}".encode()).hexdigest()
    return f"tp_model_{digest[:40]}"


def status_ddl(table: str) -> str:
    return (f"CREATE TABLE IF NOT EXISTS {table} ("
            "data_model_name VARCHAR(255) NOT NULL PRIMARY KEY, "
            "transfer_last_updated_at DATETIME(6) NULL, "
            "high_watermark DATETIME(6) NULL, "
            "state LONGTEXT NULL, "
            "refresh_state LONGTEXT NULL, "
            "published_state LONGTEXT NULL, "
            "last_transfer_id VARCHAR(255) NULL, "
            f"updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) {TABLE_OPTIONS}")


def drop_table(table: str, *, if_exists: bool = True) -> str:
    return f"DROP TABLE {'IF EXISTS ' if if_exists else ''}{table}"


def marked(column: str, data_type: str, alias: str | None = None) -> str:
    """The condition that a row is marked deleted (a boolean marker true, a timestamp one set)."""
    ref = (f"{alias}." if alias else "") + q(column)
    return f"COALESCE({ref} = 1, FALSE)" if data_type == "boolean" else f"{ref} IS NOT NULL"


def batch_summary_sql(model: ModelConfig, staging: str) -> str:
    """One scan of a staged batch; parameter: the high watermark (twice, NULL if none). Rows, rows
    newer than it, the greatest last-modified value, NULL keys, NULL last-modified values, rows
    marked deleted newer than it (all, without one)."""
    lm = q(model.last_modified.destination_name)
    null_key = " OR ".join(f"{q(c.destination_name)} IS NULL" for c in model.primary_key)
    marker = model.deletion_marker
    flagged = "FALSE" if marker is None else marked(marker.destination_name, marker.data_type)
    return (f"SELECT count(*), COALESCE(SUM({lm} > %s), 0), MAX({lm}), COALESCE(SUM({null_key}), 0), "
            f"COALESCE(SUM({lm} IS NULL), 0), COALESCE(SUM({flagged} AND ({lm} > %s OR %s IS NULL)), 0) "
            f"FROM {staging}")


def first_key_where_null(staging: str, keys: list[str], column: str) -> str:
    key_sql = ", ".join(q(k) for k in keys)
    return f"SELECT {key_sql} FROM {staging} WHERE {q(column)} IS NULL LIMIT 1"


def first_duplicate_key(staging: str, keys: list[str]) -> str:
    key_sql = ", ".join(q(k) for k in keys)
    return f"SELECT {key_sql}, count(*) FROM {staging} GROUP BY {key_sql} HAVING count(*) > 1 LIMIT 1"


def first_duplicate_held_key(staging: str, target: str, keys: list[str]) -> str:
    """One key staged more than once that ``target`` already holds, with its count (a key the
    target does not hold, staged twice, is refused by the target's primary key at the insert)."""
    key_sql = ", ".join(f"s.{q(k)}" for k in keys)
    return (f"SELECT {key_sql}, count(*) FROM {staging} AS s JOIN {target} AS t ON {_join(keys)} "
            f"GROUP BY {key_sql} HAVING count(*) > 1 LIMIT 1")


def first_out_of_range(staging: str, keys: list[str], columns: list[str]) -> str:
    """A staged row with a date or timestamp before year 1000 in one of ``columns``: its key and
    that column's values."""
    key_sql = ", ".join(q(k) for k in keys)
    values = ", ".join(q(c) for c in columns)
    where = " OR ".join(f"{q(c)} < '{EARLIEST}'" for c in columns)
    return f"SELECT {key_sql}, {values} FROM {staging} WHERE {where} LIMIT 1"


def first_long_key(staging: str, keys: list[str], string_keys: list[str]) -> str:
    """A staged row whose string key is longer than a key column holds."""
    key_sql = ", ".join(f"LEFT({q(k)}, 40)" for k in keys)
    where = " OR ".join(f"CHAR_LENGTH({q(k)}) > {KEY_STRING_LENGTH}" for k in string_keys)
    return f"SELECT {key_sql} FROM {staging} WHERE {where} LIMIT 1"


def load_data(staging: str, path: str, columns: list[str]) -> str:
    """``LOAD DATA LOCAL INFILE`` of a CSV file written by :mod:`.load` (every field quoted,
    ``\\N`` for NULL, backslashes doubled)."""
    names = ", ".join(q(c) for c in columns)
    return (f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE {staging} CHARACTER SET utf8mb4 "
            "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '\\\\' "
            f"LINES TERMINATED BY '\\n' ({names})")


def insert_values(staging: str, columns: list[str]) -> str:
    """A multi-row insert's statement (PyMySQL's ``executemany`` folds rows into one VALUES list)."""
    return f"INSERT INTO {staging} ({', '.join(q(c) for c in columns)}) VALUES ({', '.join(['%s'] * len(columns))})"


# -- the commit of a window: a staged delete + insert, in one transaction --------------------------

def _join(keys: Sequence[str]) -> str:
    return " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in keys)


def soft_delete(target: str, staging: str, keys: Sequence[str], last_modified: str, marker: str,
                marker_type: str) -> str:
    """Remove the target rows the staging table marks deleted, unless the delivered row is newer
    (at the same last-modified value the delete wins)."""
    lm = q(last_modified)
    return (f"DELETE t FROM {target} AS t JOIN {staging} AS s ON {_join(keys)} "
            f"WHERE {marked(marker, marker_type, 's')} AND s.{lm} >= t.{lm}")


def replaced_rows(target: str, staging: str, columns: Sequence[str], keys: Sequence[str],
                  last_modified: str) -> str:
    """Delete the target rows a staged row replaces: a newer one, or an equally new one that
    differs (NULL-safe); the staged row is then inserted by :func:`insert_new`. An older staged
    version never replaces a newer delivered one (the last-modified tie-break)."""
    lm = q(last_modified)
    compared = [c for c in columns if c not in keys and c != last_modified]
    same = " AND ".join(f"t.{q(c)} <=> s.{q(c)}" for c in compared)
    condition = f"s.{lm} > t.{lm}" + (f" OR (s.{lm} = t.{lm} AND NOT ({same}))" if compared else "")
    return f"DELETE t FROM {target} AS t JOIN {staging} AS s ON {_join(keys)} WHERE {condition}"


def insert_new(target: str, staging: str, columns: Sequence[str], keys: Sequence[str],
               skip: str | None = None) -> str:
    """Insert the staged rows whose key the target does not hold (``skip``: rows left out)."""
    names = ", ".join(q(c) for c in columns)
    selected = ", ".join(f"s.{q(c)}" for c in columns)
    where = f"NOT EXISTS (SELECT 1 FROM {target} AS t WHERE {_join(keys)})" + (f" AND NOT ({skip})" if skip else "")
    return f"INSERT INTO {target} ({names}) SELECT {selected} FROM {staging} AS s WHERE {where}"


def delete_matching(target: str, staging: str, columns: Sequence[str]) -> str:
    """Delete the target rows equal to a staged row on every one of ``columns`` (the sweep)."""
    return f"DELETE t FROM {target} AS t JOIN {staging} AS s ON {_join(columns)}"


# -- catalog look-ups (parameters: database, table) ----------------------------------------------

TABLE_EXISTS = "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
COLUMNS = ("SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
           "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION")
PRIMARY_KEY = ("SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
               "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY COLUMN_NAME")
TABLE_SIZE = ("SELECT COALESCE(DATA_LENGTH + INDEX_LENGTH, 0) FROM information_schema.TABLES "
              "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s")
TABLES_STARTING_WITH = ("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                        "AND LEFT(TABLE_NAME, CHAR_LENGTH(%s)) = %s")
LOCK_HOLDER = ("SELECT p.USER, p.HOST, p.TIME FROM information_schema.PROCESSLIST p "
               "WHERE p.ID = IS_USED_LOCK(%s)")


def add_column(table: str, column: ColumnConfig) -> str:
    return f"ALTER TABLE {table} ADD COLUMN {q(column.destination_name)} {column_type(column)} NULL"


def drop_column(table: str, column: str) -> str:
    return f"ALTER TABLE {table} DROP COLUMN {q(column)}"


# -- the status table: parameters as each function says --------------------------------------------

def ensure_status_row(status: str) -> str:
    return f"INSERT IGNORE INTO {status} (data_model_name) VALUES (%s)"


def read_states(status: str) -> str:
    return f"SELECT state, refresh_state, published_state FROM {status} WHERE data_model_name = %s"


def read_state(status: str, column: str = "state", *, for_update: bool = False) -> str:
    if column not in ("state", "refresh_state", "published_state"):
        raise ValueError(f"not a state column: {column!r}")
    return f"SELECT {column} FROM {status} WHERE data_model_name = %s" + (" FOR UPDATE" if for_update else "")


def set_column(status: str, column: str) -> str:
    """Parameters: the value (state json or NULL), model name."""
    if column not in ("refresh_state", "published_state"):
        raise ValueError(f"not a state column: {column!r}")
    return f"UPDATE {status} SET {column} = %s WHERE data_model_name = %s"


def record_state(status: str) -> str:
    """Parameters: watermark, high watermark, state json, transfer id, model name."""
    return (f"UPDATE {status} SET transfer_last_updated_at = %s, high_watermark = %s, state = %s, "
            "last_transfer_id = %s, updated_at = CURRENT_TIMESTAMP(6) WHERE data_model_name = %s")


def rename_tables(*pairs: tuple[str, str]) -> str:
    """One atomic ``RENAME TABLE`` of every (from, to) pair, in order."""
    return "RENAME TABLE " + ", ".join(f"{a} TO {b}" for a, b in pairs)
