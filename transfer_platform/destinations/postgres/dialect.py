"""The PostgreSQL destination's SQL, tested as text: :class:`PostgresDialect` and PostgreSQL's own steps (the
swap, a refresh's publish, the probe). Tables come quoted, columns and schemas are quoted here; values are
parameters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from transfer_platform.core.sql import qualified, quote_ident
from transfer_platform.destinations.sql.dialect import Dialect, Statement, StatusTypes
from transfer_platform.storage.locks import advisory_key

if TYPE_CHECKING:
    from transfer_platform.config.models import ColumnConfig, ModelConfig

#: the advisory lock key (a signed 64-bit integer) of one model: ``(database, schema, model)``
model_lock_key = advisory_key


def probe_steps(schema: str, name: str) -> list[tuple[str, list[str]]]:
    """What a transfer does in its schema, as (check, statements) in the order they depend on each other."""
    table, staging, renamed = (qualified(schema, n) for n in (name, name + "_s", name + "_r"))
    return [
        (f"create schema {quote_ident(schema)}", [create_schema(schema)]),
        (f"create tables in schema {quote_ident(schema)} (model, status and staging tables)",
         [f"CREATE TABLE {table} (id bigint PRIMARY KEY, v text)",
          f"CREATE UNLOGGED TABLE {staging} AS SELECT * FROM {table} WITH NO DATA"]),
        ("insert, update, delete and truncate rows (merge, state, full refresh)",
         [f"INSERT INTO {table} VALUES (1, 'a') ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
          f"UPDATE {table} SET v = 'b'", f"DELETE FROM {table}", f"TRUNCATE {table}"]),
        ("add and drop columns (schema evolution)",
         [f"ALTER TABLE {table} ADD COLUMN w text", f"ALTER TABLE {table} DROP COLUMN w"]),
        ("rename tables and constraints (a backfill into an empty table, a full refresh)",
         [f"ALTER TABLE {table} RENAME TO {quote_ident(name + '_r')}",
          rename_constraint(renamed, name + "_pkey", name + "_k")]),
        ("drop tables (staging, full refresh)", [f"DROP TABLE {renamed}", f"DROP TABLE {staging}"]),
    ]


# -- catalog look-ups (parameters only) -----------------------------------------------------------

SCHEMA_EXISTS = "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = %s)"
PRIMARY_KEY_NAME = "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'"
#: objects depending on table %(t)s other than its row type and its primary key (index, trigger,
#: view, policy, publication, foreign key, check, default, ...), or on its row type (a function
#: returning it, a column of that type): replacing the table would lose them
DEPENDENTS_BUT_THE_KEY = (
    "SELECT count(*) FROM pg_depend d WHERE ((d.refclassid = 'pg_class'::regclass "
    "AND d.refobjid = %(t)s::regclass "
    "AND NOT (d.deptype = 'i' AND d.classid IN ('pg_type'::regclass, 'pg_class'::regclass)) "
    "AND NOT (d.classid = 'pg_constraint'::regclass AND d.objid IN "
    "(SELECT oid FROM pg_constraint WHERE conrelid = %(t)s::regclass AND contype = 'p'))) "
    "OR (d.refclassid = 'pg_type'::regclass AND d.refobjid = "
    "(SELECT reltype FROM pg_class WHERE oid = %(t)s::regclass) "
    "AND NOT (d.deptype = 'i' AND d.classid = 'pg_type'::regclass)))")
#: two tables (target, replacement) with the same owner, grants, storage options, persistence,
#: tablespace, access method, replica identity and row security, neither a partition nor an
#: inheritance child, the first without a comment (on it, its columns, its key) or security label
SAME_OWNER_GRANTS_AND_OPTIONS = (
    "SELECT t.relowner = s.relowner AND t.relacl IS NOT DISTINCT FROM s.relacl "
    "AND t.reloptions IS NOT DISTINCT FROM s.reloptions AND t.relrowsecurity = s.relrowsecurity "
    "AND t.relforcerowsecurity = s.relforcerowsecurity AND t.relpersistence = s.relpersistence "
    "AND t.reltablespace = s.reltablespace AND t.relam = s.relam AND t.relreplident = s.relreplident "
    "AND NOT t.relispartition AND NOT s.relispartition "
    "AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid IN (t.oid, s.oid)) "
    "AND NOT EXISTS (SELECT FROM pg_description c WHERE (c.objoid = t.oid "
    "AND c.classoid = 'pg_class'::regclass) OR (c.classoid = 'pg_constraint'::regclass AND c.objoid IN "
    "(SELECT oid FROM pg_constraint WHERE conrelid = t.oid)) OR (c.classoid = 'pg_class'::regclass "
    "AND c.objoid IN (SELECT indexrelid FROM pg_index WHERE indrelid = t.oid))) "
    "AND NOT EXISTS (SELECT FROM pg_seclabel l WHERE l.objoid = t.oid AND l.classoid = 'pg_class'::regclass) "
    "FROM pg_class t, pg_class s WHERE t.oid = %s::regclass AND s.oid = %s::regclass")
#: two tables (target, replacement) whose columns are alike, in the same order: name, type and
#: modifier, collation, NOT NULL (outside the primary key), column grants, the n_distinct options
#: (the only ones a user sets; a server may keep others of its own there), statistics target,
#: storage, compression, identity, generated, default
SAME_COLUMNS = (
    "WITH tables(rel, n) AS (VALUES (%s::regclass, 1), (%s::regclass, 2)), "
    "columns AS (SELECT n, array_agg(ROW(a.attname, a.atttypid, a.atttypmod, a.attcollation, "
    "a.attnotnull AND NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = a.attrelid "
    "AND i.indisprimary AND a.attnum = ANY(i.indkey)), "
    "a.attacl, ARRAY(SELECT o FROM unnest(a.attoptions) o WHERE o LIKE 'n\\_distinct%%' ORDER BY o), "
    "a.attstattarget, a.attstorage, a.attcompression, a.attidentity, "
    "a.attgenerated, a.atthasdef)::text ORDER BY a.attnum) AS described "
    "FROM tables JOIN pg_attribute a ON a.attrelid = tables.rel AND a.attnum > 0 AND NOT a.attisdropped "
    "GROUP BY n) "
    "SELECT count(*) = 2 AND count(DISTINCT described) = 1 FROM columns")
#: two tables (target, replacement) with the same primary key: its columns in key order, its
#: deferrability and its index's options and tablespace
SAME_PRIMARY_KEY = (
    "WITH tables(rel, n) AS (VALUES (%s::regclass, 1), (%s::regclass, 2)), "
    "keys AS (SELECT n, ROW(k.condeferrable, k.condeferred, x.reloptions, x.reltablespace, "
    "(SELECT array_agg(a.attname ORDER BY o.ord) FROM unnest(i.indkey) WITH ORDINALITY o(attnum, ord) "
    "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = o.attnum))::text AS described "
    "FROM tables JOIN pg_constraint k ON k.conrelid = tables.rel AND k.contype = 'p' "
    "JOIN pg_index i ON i.indexrelid = k.conindid JOIN pg_class x ON x.oid = i.indexrelid) "
    "SELECT count(*) = 2 AND count(DISTINCT described) = 1 FROM keys")
#: whether another table's foreign key references table %s (``TRUNCATE`` refuses such a table)
REFERENCED_BY_ANOTHER_TABLE = ("SELECT EXISTS (SELECT FROM pg_constraint WHERE contype = 'f' "
                               "AND confrelid = %s::regclass AND conrelid <> confrelid)")


def not_owned(count: int) -> str:
    """(schema, table) of each of ``count`` tables (parameters) that exists and is not the current role's."""
    return ("SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE c.oid = ANY(ARRAY[{', '.join(['to_regclass(%s)'] * count)}]) "
            "AND NOT pg_has_role(current_user, c.relowner, 'USAGE')")


# -- PostgreSQL's own steps ----------------------------------------------------------------------

def _names(columns: Sequence[str]) -> str:
    return ", ".join(quote_ident(c) for c in columns)


def create_schema(schema: str) -> str:
    return f"CREATE SCHEMA {quote_ident(schema)}"


def add_refresh_state_column(status: str) -> str:
    return f"ALTER TABLE {status} ADD COLUMN IF NOT EXISTS refresh_state jsonb"  # older tables lack it


def copy_csv(staging: str, columns: list[str], fmt: str = "csv") -> str:
    """``COPY ... FROM STDIN``: CSV from Arrow, or ``fmt="binary"`` from a PostgreSQL source."""
    return f"COPY {staging} ({_names(columns)}) FROM STDIN (FORMAT {fmt})"


def copy_into_live(live: str, aside: str, columns: list[str]) -> list[str]:
    """A refresh copied into the live table, whose identity something depends on (views, foreign keys, ...)."""
    return [f"TRUNCATE {live}", f"INSERT INTO {live} ({_names(columns)}) SELECT {_names(columns)} FROM {aside}",
            f"DROP TABLE {aside}"]


def merge_into_live(live: str, aside: str, columns: list[str], key: list[str]) -> list[str]:
    """A refresh merged into a live table that a foreign key references (``TRUNCATE`` refuses it): the rows
    the aside table lacks deleted (the key's ``ON DELETE`` applies), the new ones inserted, the changed updated."""
    q, names, rest = quote_ident, _names(columns), [c for c in columns if c not in key]
    match = " AND ".join(f"a.{q(k)} = t.{q(k)}" for k in key)
    before, after = (", ".join(f"{row}.{q(c)}" for c in rest) for row in ("t", "EXCLUDED"))
    conflict = (f"DO UPDATE SET {', '.join(f'{q(c)} = EXCLUDED.{q(c)}' for c in rest)} "
                f"WHERE ROW({before}) IS DISTINCT FROM ROW({after})") if rest else "DO NOTHING"
    return [f"DELETE FROM {live} AS t WHERE NOT EXISTS (SELECT FROM {aside} AS a WHERE {match})",
            f"INSERT INTO {live} AS t ({names}) SELECT {names} FROM {aside} ON CONFLICT ({_names(key)}) {conflict}",
            f"DROP TABLE {aside}"]


def lock_exclusive(*tables: str) -> str:
    return f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE"


def analyze(table: str) -> str:
    return f"ANALYZE {table}"


def add_primary_key(table: str, columns: list[str]) -> str:
    return f"ALTER TABLE {table} ADD PRIMARY KEY ({_names(columns)})"


def rename_constraint(table: str, old: str, new: str) -> str:
    return f"ALTER TABLE {table} RENAME CONSTRAINT {quote_ident(old)} TO {quote_ident(new)}"


class PostgresDialect(Dialect):
    vendor = "postgres"
    status_types = StatusTypes("text PRIMARY KEY", "timestamp with time zone", "jsonb", "text",
                               "timestamp with time zone NOT NULL DEFAULT now()")
    as_text, as_json = "::text", "::jsonb"

    def quote(self, name: str) -> str:
        return quote_ident(name)

    def table_exists(self, container: str, name: str) -> Statement:
        # to_regclass creates nothing and needs no right on the table
        return "SELECT to_regclass(%s) IS NOT NULL", (qualified(container, name),)

    def columns(self, container: str, name: str) -> Statement:
        return ("SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a WHERE a.attrelid = "
                "to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                (qualified(container, name),))

    def primary_key(self, container: str, name: str) -> Statement:
        return ("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = "
                "ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary ORDER BY a.attname",
                (qualified(container, name),))

    def tables_starting_with(self, container: str, prefix: str) -> Statement:
        return ("SELECT tablename FROM pg_tables WHERE schemaname = %s AND starts_with(tablename, %s)",
                (container, prefix))

    def staging_ddl(self, staging: str, target: str, model: ModelConfig, columns: Sequence[ColumnConfig] | None,
                    *, logged: bool) -> str:
        """The target's columns (all, or ``columns``), no constraints; unlogged unless it may become the target."""
        names = "*" if columns is None else _names([c.destination_name for c in columns])
        return f"CREATE {'' if logged else 'UNLOGGED '}TABLE {staging} AS SELECT {names} FROM {target} WITH NO DATA"

    def watermark_parameter(self, column: ColumnConfig) -> str:
        return "%(hw)s"

    def staged_size(self, staging: str) -> tuple[str, dict[str, Any]]:
        return "pg_total_relation_size(%(staging)s::regclass)", {"staging": staging}
