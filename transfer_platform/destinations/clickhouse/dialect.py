"""The ClickHouse destination's SQL, planned without a server. A model's table is a
``ReplacingMergeTree(<last-modified>, _tp_deleted)`` ordered by its key: read with ``FINAL``, per key
the row of the greatest last-modified value, at an equal one the last inserted (the platform's
tie-break), none when that row has ``_tp_deleted = 1``. Key and last-modified columns cannot be
Nullable (a sorting key, a version); every staging column is, so that the scan finds a NULL and
refuses it by name. The model's state is its table's comment; ``_transfer_status`` is a view of them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from transfer_platform.destinations.sql.dialect import STATUS_TABLE, Dialect, Statement
from transfer_platform.destinations.sql.dialect import backslashed as literal
from transfer_platform.destinations.sql.dialect import backticked as quote

if TYPE_CHECKING:
    from transfer_platform.config.models import ColumnConfig, ModelConfig

#: the hidden column of a model's table: 1 on a row that removes its key (ReplacingMergeTree's is_deleted)
DELETED = "_tp_deleted"
#: the tables of the platform's own in the recipient's database (left out of _transfer_status)
OWN_PREFIX = "_tp_"
#: the last-modified types ReplacingMergeTree can order versions by
VERSION_TYPES = ("timestamp", "date", "integer")
_IN = "database = {db:String} AND "  # a system table's rows of one database
_NAME = r"`(?:[^`\\]|\\.)*`"  # a quoted name


def split_qualified(qualified: str) -> tuple[str, str]:
    """``(database, table)`` of a name :meth:`ClickhouseDialect.qualified` wrote."""
    match = re.fullmatch(f"({_NAME})\\.({_NAME})", qualified)
    if match is None:
        raise ValueError(f"not a qualified ClickHouse name: {qualified!r}")
    database, table = (re.sub(r"\\(.)", r"\1", part[1:-1]) for part in match.groups())
    return database, table


def _bare(type_name: str) -> str:
    """A type without ``Nullable(...)`` and the spaces after commas system.columns may write."""
    return re.sub(r"^Nullable\((.*)\)$", r"\1", type_name).replace(", ", ",")


class ClickhouseDialect(Dialect):
    vendor = "clickhouse"
    quote = staticmethod(quote)

    def matches(self, declared: str, actual: str) -> bool:
        return _bare(declared) == _bare(actual)

    def nullable(self, column: ColumnConfig) -> str:
        return f"Nullable({self.column_type(column)})"

    def marked(self, column: str, data_type: str, alias: str | None = None) -> str:
        ref = (f"{alias}." if alias else "") + self.quote(column)
        return f"coalesce({ref}, false)" if data_type == "boolean" else f"{ref} IS NOT NULL"

    def _strict(self, model: ModelConfig) -> set[str]:
        return {c.destination_name for c in model.primary_key} | {model.last_modified.destination_name}

    # -- the catalog: system tables ----------------------------------------------------------------

    def table_exists(self, container: str, name: str) -> Statement:
        return f"SELECT count() > 0 FROM system.tables WHERE {_IN}name = {{name:String}}", {"db": container, "name": name}

    def columns(self, container: str, name: str) -> Statement:
        return (f"SELECT name, type FROM system.columns WHERE {_IN}table = {{name:String}} AND name != "
                "{hidden:String} ORDER BY position", {"db": container, "name": name, "hidden": DELETED})

    def primary_key(self, container: str, name: str) -> Statement:
        return (f"SELECT name FROM system.columns WHERE {_IN}table = {{name:String}} AND is_in_primary_key "
                "ORDER BY name", {"db": container, "name": name})

    def tables_starting_with(self, container: str, prefix: str) -> Statement:
        return (f"SELECT name FROM system.tables WHERE {_IN}startsWith(name, {{prefix:String}})",
                {"db": container, "prefix": prefix})

    def comment(self, container: str, name: str) -> Statement:
        return f"SELECT comment FROM system.tables WHERE {_IN}name = {{name:String}}", {"db": container, "name": name}

    def database_exists(self, container: str) -> Statement:
        return "SELECT count() FROM system.databases WHERE name = {db:String}", {"db": container}

    def table_size(self, container: str, name: str) -> Statement:
        return (f"SELECT sum(bytes_on_disk) FROM system.parts WHERE {_IN}table = {{name:String}} AND active",
                {"db": container, "name": name})

    # -- tables ----------------------------------------------------------------------------------

    def status_ddl(self, status: str) -> str:
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
        strict = self._strict(model)
        columns = ", ".join(f"{self.quote(c.destination_name)} "
                            f"{self.column_type(c) if c.destination_name in strict else self.nullable(c)}"
                            for c in model.columns)
        key = ", ".join(self.quote(c.destination_name) for c in model.primary_key)
        return (f"CREATE TABLE IF NOT EXISTS {table} ({columns}, {self.quote(DELETED)} UInt8 DEFAULT 0) ENGINE = "
                f"ReplacingMergeTree({self.quote(model.last_modified.destination_name)}, {self.quote(DELETED)}) "
                f"ORDER BY ({key})")

    def staging_ddl(self, staging: str, target: str, model: ModelConfig, columns: Sequence[ColumnConfig] | None,
                    *, logged: bool) -> str:
        cols = ", ".join(f"{self.quote(c.destination_name)} {self.nullable(c)}" for c in (columns or model.columns))
        return f"CREATE TABLE {staging} ({cols}) ENGINE = MergeTree ORDER BY tuple()"

    def drop_table(self, table: str, *, if_exists: bool = True) -> str:
        return f"DROP TABLE {'IF EXISTS ' if if_exists else ''}{table} SYNC"

    def alter_columns(self, table: str, added: Sequence[ColumnConfig], dropped: Sequence[str]) -> list[str]:
        return ([f"ALTER TABLE {table} ADD COLUMN {self.quote(c.destination_name)} {self.nullable(c)}"
                 for c in added] + [f"ALTER TABLE {table} DROP COLUMN {self.quote(name)}" for name in dropped])

    def rename_tables(self, container: str, pairs: Sequence[tuple[str, str]]) -> list[str]:
        return [f"RENAME TABLE {table} TO {self.qualified(container, name)}" for table, name in pairs]

    # -- a window's swap: a clone holding the table's parts (hard links), exchanged with it ----------

    def clone_ddl(self, clone: str, table: str) -> str:
        return f"CREATE TABLE {clone} AS {table}"  # its engine, columns and comment

    def attach_all(self, clone: str, table: str) -> str:
        return f"ALTER TABLE {clone} ATTACH PARTITION ALL FROM {table}"

    def exchange(self, a: str, b: str) -> str:
        return f"EXCHANGE TABLES {a} AND {b}"  # names, rows and comments, in one atomic step

    def set_comment(self, table: str, comment: str) -> str:
        return f"ALTER TABLE {table} MODIFY COMMENT {literal(comment)}"

    def watermark_parameter(self, column: ColumnConfig) -> str:
        return f"{{hw:{self.nullable(column)}}}"

    def window_insert(self, into: str, staging: str, target: str, model: ModelConfig, columns: Sequence[str]) -> str:
        """The staged rows into the clone: a row marked deleted, when the model removes them, as a
        ``_tp_deleted`` row of its key (hidden unless the delivered row is later); an
        ``is_append_only`` model's rows only where the target lacks their key."""
        strict, marker = self._strict(model), model.deletion_marker
        deleted = f"toUInt8({self.marked(marker.destination_name, marker.data_type)})" if model.removes_deleted_rows else "0"
        values = ", ".join(f"assumeNotNull({self.quote(c)})" if c in strict else self.quote(c) for c in columns)
        key = ", ".join(self.quote(c.destination_name) for c in model.primary_key)
        where = f" WHERE ({key}) NOT IN (SELECT {key} FROM {target} FINAL)" if model.is_append_only else ""
        return (f"INSERT INTO {into} ({', '.join(self.quote(c) for c in columns)}, {self.quote(DELETED)}) "
                f"SELECT {values}, {deleted} FROM {staging}{where}")

    def removed_count(self, staging: str, target: str, model: ModelConfig) -> str:
        """The delivered rows a window's soft deletes remove (not a later one; at an equal
        last-modified value the delete wins)."""
        marker = model.deletion_marker
        keys = [self.quote(c.destination_name) for c in model.primary_key]
        lm = self.quote(model.last_modified.destination_name)
        on = " AND ".join(f"s.{k} = t.{k}" for k in keys)
        return (f"SELECT count() FROM {staging} AS s INNER JOIN (SELECT {', '.join(keys)}, {lm} FROM {target} FINAL) "
                f"AS t ON {on} WHERE {self.marked(marker.destination_name, marker.data_type, 's')} AND t.{lm} <= s.{lm}")

    def _swept(self, staging: str, target: str, columns: Sequence[str]) -> str:
        on = " AND ".join(f"t.{self.quote(c)} = s.{self.quote(c)}" for c in columns)
        return f"FROM (SELECT {', '.join(map(self.quote, columns))} FROM {target} FINAL) AS t INNER JOIN {staging} AS s ON {on}"

    def sweep_insert(self, into: str, staging: str, target: str, columns: Sequence[str]) -> str:
        return (f"INSERT INTO {into} ({', '.join(map(self.quote, columns))}, {self.quote(DELETED)}) "
                f"SELECT {', '.join(f't.{self.quote(c)}' for c in columns)}, 1 {self._swept(staging, target, columns)}")

    def sweep_count(self, staging: str, target: str, columns: Sequence[str]) -> str:
        return f"SELECT count() {self._swept(staging, target, columns)}"
