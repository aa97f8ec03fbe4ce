"""Names, the catalog and the states: the tables a writer keeps in its schema (the models',
``_transfer_status``, a refresh's table built aside), their columns and primary keys as DuckDB
describes them, and each model's state read and recorded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.core.sql import qualified, quote_ident
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import staging_suffix
from transfer_platform.destinations.duckdb.file import fetch_all, fetch_one
from transfer_platform.vendors import DESTINATIONS

if TYPE_CHECKING:
    import duckdb

    from transfer_platform.config.models import ModelConfig

STATUS_TABLE = "_transfer_status"
REFRESH_PREFIX = "_tp_refresh_"


def column_type(data_type: str) -> str:
    """The DuckDB type of a model column's ``data_type``, as ``duckdb_columns()`` names it."""
    return DESTINATIONS["duckdb"].column_types[data_type]



class Catalog:
    """The schema's tables and the models' states (a mixin of ``DuckdbWriter``)."""

    schema: str

    def table(self, model: ModelConfig) -> str:
        return qualified(self.schema, model.model_name)

    def refresh_name(self, model: ModelConfig) -> str:
        return REFRESH_PREFIX + staging_suffix(model.model_name, "").rstrip("_")

    def refresh_table(self, model: ModelConfig) -> str:
        return qualified(self.schema, self.refresh_name(model))

    @property
    def status_table(self) -> str:
        return qualified(self.schema, STATUS_TABLE)


    def _exists(self, conn: duckdb.DuckDBPyConnection, name: str) -> bool:
        return fetch_one(conn, "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                            "AND schema_name = ? AND table_name = ?", [self.schema, name])[0] > 0

    def _columns(self, conn: duckdb.DuckDBPyConnection, name: str) -> dict[str, str]:
        return dict(fetch_all(conn,
            "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
            "AND schema_name = ? AND table_name = ? ORDER BY column_index", [self.schema, name]))

    def _primary_key(self, conn: duckdb.DuckDBPyConnection, name: str) -> list[str]:
        row = fetch_one(conn,
            "SELECT constraint_column_names FROM duckdb_constraints() WHERE database_name = current_database() "
            "AND schema_name = ? AND table_name = ? AND constraint_type = 'PRIMARY KEY'",
            [self.schema, name])
        return sorted(row[0]) if row else []

    def _columns_match(self, conn: duckdb.DuckDBPyConnection, model: ModelConfig, name: str) -> bool:
        expected = {c.destination_name: column_type(c.data_type) for c in model.columns}
        return (self._columns(conn, name) == expected
                and self._primary_key(conn, name) == sorted(c.destination_name for c in model.primary_key))

    def _target_ddl(self, table: str, model: ModelConfig, *, if_not_exists: bool = True) -> str:
        columns = ", ".join(f"{quote_ident(c.destination_name)} {column_type(c.data_type)}" for c in model.columns)
        key = ", ".join(quote_ident(c.destination_name) for c in model.primary_key)
        return f"CREATE TABLE {'IF NOT EXISTS ' if if_not_exists else ''}{table} ({columns}, PRIMARY KEY ({key}))"

    # -- states ----------------------------------------------------------------------------------

    def _state(self, conn: duckdb.DuckDBPyConnection, model: ModelConfig, column: str = "state") -> ModelState:
        if column not in ("state", "refresh_state"):
            raise ValueError(f"not a state column: {column!r}")
        row = fetch_one(conn, f"SELECT {column}::VARCHAR FROM {self.status_table} WHERE data_model_name = ?",
                           [model.model_name])
        return ModelState.from_json(row[0] if row else None)

    def _record(self, conn: duckdb.DuckDBPyConnection, model: ModelConfig, *, state: ModelState | None = None,
                transfer_id: str | None = None, refresh: ModelState | None | bool = False) -> None:
        """The model's status row (created if missing): its state, and/or its refresh's state
        (``refresh=None`` clears it; ``False`` leaves it)."""
        fetch_all(conn, f"INSERT INTO {self.status_table} (data_model_name) VALUES (?) ON CONFLICT DO NOTHING",
                     [model.model_name])
        if state is not None:
            fetch_all(conn, f"UPDATE {self.status_table} SET transfer_last_updated_at = ?, high_watermark = ?, "
                         "state = ?::JSON, last_transfer_id = ?, updated_at = now() WHERE data_model_name = ?",
                         [state.watermark, state.high_watermark, state.to_json(), transfer_id, model.model_name])
        if refresh is not False:
            fetch_all(conn, f"UPDATE {self.status_table} SET refresh_state = ?::JSON WHERE data_model_name = ?",
                         [None if refresh is None else refresh.to_json(), model.model_name])
