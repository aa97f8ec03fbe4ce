"""The SQL text of the ClickHouse destination, planned without a server: :class:`ClickhouseDialect`.

ClickHouse has no multi-statement transactions, so its tables are shaped for a window that becomes
visible in one step (the writer's ``_atomically`` says how):

- a model's table is a ``ReplacingMergeTree(<last-modified>, _tp_deleted)`` ordered by the primary
  key: per key, a reader with ``FINAL`` sees the row of the greatest last-modified value, at an
  equal value the last inserted, and nothing when that row has ``_tp_deleted = 1`` (a soft delete,
  or a row the delete sweep removed). That is the platform's tie-break: a row replaces the
  delivered one when it is later, or equal (and so the last written); a delete at an equal value
  wins;
- the model's **state lives in its table's comment** (JSON: the watermarks, the windows done, the
  transfer), so one ``EXCHANGE TABLES`` swaps rows and state together; ``_transfer_status`` is a
  view of those comments (``system.tables``), a row per model table;
- key and last-modified columns are not Nullable (ClickHouse's sorting key and version); every
  other column is ``Nullable(<type>)``; the staging table's are all Nullable, so that a NULL key or
  last-modified value is found by the scan and refused by name.

Values are server-side parameters (``{p0:Type}``); a table comment is a quoted literal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from transfer_platform.destinations.sql.dialect import STATUS_TABLE, Dialect, Statement

if TYPE_CHECKING:
    from transfer_platform.config.models import ColumnConfig, ModelConfig

#: the hidden column of a model's table: 1 on a row that removes its key (ReplacingMergeTree's is_deleted)
DELETED = "_tp_deleted"
#: the tables of the platform's own in the recipient's database (left out of _transfer_status)
OWN_PREFIX = "_tp_"
#: the last-modified types ReplacingMergeTree can order versions by
VERSION_TYPES = ("timestamp", "date", "integer")

_NULLABLE = re.compile(r"^Nullable\((.*)\)$")


def _bare(type_name: str) -> str:
    """A type without ``Nullable(...)`` and spaces after commas (as system.columns may write it)."""
    match = _NULLABLE.match(type_name)
    return (match.group(1) if match else type_name).replace(", ", ",")


def literal(text: str) -> str:
    """A ClickHouse string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def unquote(quoted: str) -> str:
    """An identifier as :meth:`ClickhouseDialect.quote` quoted it, back to its name."""
    return re.sub(r"\\(.)", r"\1", quoted[1:-1])


def split_qualified(qualified: str) -> tuple[str, str]:
    """``(database, table)`` of a qualified name of :meth:`ClickhouseDialect.qualified`."""
    match = re.fullmatch(r"(`(?:[^`\\]|\\.)*`)\.(`(?:[^`\\]|\\.)*`)", qualified)
    if match is None:
        raise ValueError(f"not a qualified ClickHouse name: {qualified!r}")
    return unquote(match.group(1)), unquote(match.group(2))


class ClickhouseDialect(Dialect):
    vendor = "clickhouse"
    placeholder, now, row_lock = "", "now64(6)", ""  # unused: the state is the table's comment

    def quote(self, name: str) -> str:
        return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"

    def matches(self, declared: str, actual: str) -> bool:
        return _bare(declared) == _bare(actual)

    def nullable(self, column: ColumnConfig) -> str:
        return f"Nullable({self.column_type(column)})"

    # -- the catalog -----------------------------------------------------------------------------

    def table_exists(self, container: str, name: str) -> Statement:
        return ("SELECT count() > 0 FROM system.tables WHERE database = {db:String} AND name = {name:String}",
                {"db": container, "name": name})

    def columns(self, container: str, name: str) -> Statement:
        return ("SELECT name, type FROM system.columns WHERE database = {db:String} AND table = {name:String} "
                "AND name != {hidden:String} ORDER BY position", {"db": container, "name": name, "hidden": DELETED})

    def primary_key(self, container: str, name: str) -> Statement:
        return ("SELECT name FROM system.columns WHERE database = {db:String} AND table = {name:String} "
                "AND is_in_primary_key ORDER BY name", {"db": container, "name": name})

    def tables_starting_with(self, container: str, prefix: str) -> Statement:
        return ("SELECT name FROM system.tables WHERE database = {db:String} AND startsWith(name, {prefix:String})",
                {"db": container, "prefix": prefix})

    def comment(self, container: str, name: str) -> Statement:
        """One row: the table's comment (its state), if the table exists."""
        return ("SELECT comment FROM system.tables WHERE database = {db:String} AND name = {name:String}",
                {"db": container, "name": name})

    # -- tables ----------------------------------------------------------------------------------

    def status_ddl(self, status: str) -> str:
        """``_transfer_status``: a view of the model tables' comments (each model's state, swapped in
        with its rows); a row per model table that holds a state."""
        database, _ = split_qualified(status)

        def us(*path: str) -> str:
            keys = ", ".join(literal(p) for p in path)
            return f"fromUnixTimestamp64Micro(JSONExtract(comment, {keys}, 'Nullable(Int64)'), 'UTC')"

        return (f"CREATE VIEW IF NOT EXISTS {status} AS SELECT name AS data_model_name, "
                f"{us('state', 'watermark_us')} AS transfer_last_updated_at, {us('state', 'high_watermark_us')} AS high_watermark, "
                "JSONExtractRaw(comment, 'state') AS state, "
                "JSONExtractString(comment, 'last_transfer_id') AS last_transfer_id, "
                f"{us('updated_at_us')} AS updated_at "
                f"FROM system.tables WHERE database = {literal(database)} AND NOT startsWith(name, "
                f"{literal(OWN_PREFIX)}) AND name != {literal(STATUS_TABLE)} AND isValidJSON(comment) "
                "AND JSONHas(comment, 'state')")

    def target_ddl(self, table: str, model: ModelConfig) -> str:
        return self.table_ddl(table, model, if_not_exists=True)

    def table_ddl(self, table: str, model: ModelConfig, *, if_not_exists: bool = False,
                  comment: str | None = None) -> str:
        """A model's table: key and last-modified columns as they are, the others Nullable, the
        hidden ``_tp_deleted``; a ReplacingMergeTree versioned by the last-modified column."""
        strict = {c.destination_name for c in model.primary_key} | {model.last_modified.destination_name}
        columns = ", ".join(f"{self.quote(c.destination_name)} "
                            f"{self.column_type(c) if c.destination_name in strict else self.nullable(c)}"
                            for c in model.columns)
        key = ", ".join(self.quote(c.destination_name) for c in model.primary_key)
        return (f"CREATE TABLE {'IF NOT EXISTS ' if if_not_exists else ''}{table} ({columns}, "
                f"{self.quote(DELETED)} UInt8 DEFAULT 0) ENGINE = ReplacingMergeTree("
                f"{self.quote(model.last_modified.destination_name)}, {self.quote(DELETED)}) ORDER BY ({key})"
                + ("" if comment is None else f" COMMENT {literal(comment)}"))

    def staging_ddl(self, staging: str, target: str, model: ModelConfig, columns: Sequence[ColumnConfig] | None,
                    *, logged: bool) -> str:
        cols = ", ".join(f"{self.quote(c.destination_name)} {self.nullable(c)}" for c in (columns or model.columns))
        return f"CREATE TABLE {staging} ({cols}) ENGINE = MergeTree ORDER BY tuple()"

    def clone_ddl(self, clone: str, table: str, comment: str) -> str:
        """An empty table like ``table`` (engine and columns), with ``comment``."""
        return f"CREATE TABLE {clone} AS {table} COMMENT {literal(comment)}"

    def attach_all(self, clone: str, table: str) -> str:
        """``table``'s parts into ``clone`` (hard links: no row is copied)."""
        return f"ALTER TABLE {clone} ATTACH PARTITION ALL FROM {table}"

    def exchange(self, a: str, b: str) -> str:
        """Swap two tables' names, rows and comments in one atomic step."""
        return f"EXCHANGE TABLES {a} AND {b}"

    def set_comment(self, table: str, comment: str) -> str:
        return f"ALTER TABLE {table} MODIFY COMMENT {literal(comment)}"

    def drop_table(self, table: str, *, if_exists: bool = True) -> str:
        return f"DROP TABLE {'IF EXISTS ' if if_exists else ''}{table} SYNC"

    def alter_columns(self, table: str, added: Sequence[ColumnConfig], dropped: Sequence[str]) -> list[str]:
        return ([f"ALTER TABLE {table} ADD COLUMN {self.quote(c.destination_name)} {self.nullable(c)}"
                 for c in added] + [f"ALTER TABLE {table} DROP COLUMN {self.quote(name)}" for name in dropped])

    def rename_tables(self, container: str, pairs: Sequence[tuple[str, str]]) -> list[str]:
        return [f"RENAME TABLE {table} TO {self.qualified(container, name)}" for table, name in pairs]

    # -- a staged window -------------------------------------------------------------------------

    def count_where(self, condition: str) -> str:
        return f"countIf({condition})"

    def watermark_parameter(self, column: ColumnConfig) -> str:
        return f"{{hw:{self.nullable(column)}}}"

    def table_size(self, container: str, name: str) -> Statement:
        return ("SELECT sum(bytes_on_disk) FROM system.parts WHERE database = {db:String} AND table = {name:String} "
                "AND active", {"db": container, "name": name})

    def marked(self, column: str, data_type: str, alias: str | None = None) -> str:
        ref = (f"{alias}." if alias else "") + self.quote(column)
        return f"coalesce({ref}, false)" if data_type == "boolean" else f"{ref} IS NOT NULL"

    def window_insert(self, into: str, staging: str, target: str, model: ModelConfig,
                      columns: Sequence[str]) -> str:
        """The staged rows into ``into`` (the target's clone): a row marked deleted, when the model
        removes them, as a ``_tp_deleted`` row of its key (ReplacingMergeTree then hides the key,
        unless the delivered row is later); an ``is_append_only`` model's rows only where the
        target holds no row of their key."""
        strict = {c.destination_name for c in model.primary_key} | {model.last_modified.destination_name}
        marker = model.deletion_marker
        deleted = (f"toUInt8({self.marked(marker.destination_name, marker.data_type)})"
                   if model.removes_deleted_rows else "0")
        names = ", ".join(self.quote(c) for c in columns)
        values = ", ".join(f"assumeNotNull({self.quote(c)})" if c in strict else self.quote(c) for c in columns)
        where = ""
        if model.is_append_only:
            key = ", ".join(self.quote(c.destination_name) for c in model.primary_key)
            where = f" WHERE ({key}) NOT IN (SELECT {key} FROM {target} FINAL)"
        return (f"INSERT INTO {into} ({names}, {self.quote(DELETED)}) SELECT {values}, {deleted} FROM {staging}"
                f"{where}")

    def removed_count(self, staging: str, target: str, model: ModelConfig) -> str:
        """The delivered rows a window's soft deletes remove (at an equal last-modified value the
        delete wins; a later delivered row stays)."""
        marker = model.deletion_marker
        keys = [self.quote(c.destination_name) for c in model.primary_key]
        lm = self.quote(model.last_modified.destination_name)
        on = " AND ".join(f"s.{k} = t.{k}" for k in keys)
        return (f"SELECT count() FROM {staging} AS s INNER JOIN (SELECT {', '.join(keys)}, {lm} FROM {target} FINAL) "
                f"AS t ON {on} WHERE {self.marked(marker.destination_name, marker.data_type, 's')} AND t.{lm} <= s.{lm}")

    def sweep_insert(self, into: str, staging: str, target: str, model: ModelConfig, columns: Sequence[str]) -> str:
        """The delete sweep: a ``_tp_deleted`` row for each delivered row equal to a staged one on
        key and last-modified value (a row changed since is left alone)."""
        names = ", ".join(self.quote(c) for c in columns)
        on = " AND ".join(f"t.{self.quote(c)} = s.{self.quote(c)}" for c in columns)
        picked = ", ".join(f"t.{self.quote(c)}" for c in columns)
        return (f"INSERT INTO {into} ({names}, {self.quote(DELETED)}) SELECT {picked}, 1 FROM "
                f"(SELECT {names} FROM {target} FINAL) AS t INNER JOIN {staging} AS s ON {on}")

    def sweep_count(self, staging: str, target: str, columns: Sequence[str]) -> str:
        """The delivered rows :meth:`sweep_insert` removes."""
        names = ", ".join(self.quote(c) for c in columns)
        on = " AND ".join(f"t.{self.quote(c)} = s.{self.quote(c)}" for c in columns)
        return f"SELECT count() FROM (SELECT {names} FROM {target} FINAL) AS t INNER JOIN {staging} AS s ON {on}"
