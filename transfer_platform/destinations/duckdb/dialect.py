"""The SQL text of the DuckDB destination (``?`` parameters, its own catalog functions)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from transfer_platform.core.sql import quote_ident
from transfer_platform.destinations.sql.dialect import Dialect, Statement, StatusTypes

if TYPE_CHECKING:
    from transfer_platform.config.models import ColumnConfig, ModelConfig

_IN_SCHEMA = "WHERE database_name = current_database() AND schema_name = ?"


class DuckdbDialect(Dialect):
    vendor = "duckdb"
    status_types = StatusTypes("VARCHAR PRIMARY KEY", "TIMESTAMPTZ", "JSON", "VARCHAR")
    placeholder, as_text, as_json = "?", "::VARCHAR", "::JSON"
    row_lock = ""  # one process writes a DuckDB file at a time (its own file lock)

    quote = staticmethod(quote_ident)

    def table_exists(self, container: str, name: str) -> Statement:
        return f"SELECT count(*) > 0 FROM duckdb_tables() {_IN_SCHEMA} AND table_name = ?", (container, name)

    def columns(self, container: str, name: str) -> Statement:
        return (f"SELECT column_name, data_type FROM duckdb_columns() {_IN_SCHEMA} AND table_name = ? "
                "ORDER BY column_index", (container, name))

    def primary_key(self, container: str, name: str) -> Statement:
        return (f"SELECT unnest(constraint_column_names) AS c FROM duckdb_constraints() {_IN_SCHEMA} AND "
                "table_name = ? AND constraint_type = 'PRIMARY KEY' ORDER BY c", (container, name))

    def tables_starting_with(self, container: str, prefix: str) -> Statement:
        return f"SELECT table_name FROM duckdb_tables() {_IN_SCHEMA} AND starts_with(table_name, ?)", (container, prefix)

    def staging_ddl(self, staging: str, target: str, model: ModelConfig, columns: Sequence[ColumnConfig] | None,
                    *, logged: bool) -> str:
        cols = ", ".join(f"{quote_ident(c.destination_name)} {self.column_type(c)}" for c in (columns or model.columns))
        return f"CREATE TABLE {staging} ({cols})"
