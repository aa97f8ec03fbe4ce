"""The status table, and the live table's columns: created when missing, compared with the
model's, brought to them (an added column added; a removed one dropped only with
``allow_column_drop``; a changed type or primary key refused, naming the full refresh that fixes
it). Every refusal comes before the one ``ALTER TABLE`` (a single statement: all its changes or
none)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.core.columns import ColumnChanges, plan_columns
from transfer_platform.destinations.mysql import sql

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig
    from transfer_platform.core.watermarks import ModelState


class Schema:
    """The tables' columns (a mixin of ``MysqlWriter``)."""

    def _reach(self) -> None:
        """``_transfer_status`` created if missing (the database is the recipient's: it exists)."""
        with self._translated_errors():
            self._exec(sql.status_ddl(self.status_table))

    def _exists(self, name: str) -> bool:
        return bool(self._one(sql.TABLE_EXISTS, (self.database, name))[0])

    def _columns(self, name: str) -> dict[str, str]:
        """Column name -> ``COLUMN_TYPE``; empty if the table does not exist."""
        return dict(self._all(sql.COLUMNS, (self.database, name)))

    def _primary_key(self, name: str) -> list[str]:
        return [r[0] for r in self._all(sql.PRIMARY_KEY, (self.database, name))]

    def _columns_match(self, model: ModelConfig, name: str) -> bool:
        existing = self._columns(name)
        return (set(existing) == {c.destination_name for c in model.columns}
                and all(sql.matches(sql.column_type(c), existing[c.destination_name]) for c in model.columns)
                and self._primary_key(name) == sorted(c.destination_name for c in model.primary_key))

    def _plan_columns(self, model: ModelConfig) -> ColumnChanges:
        table = self.table(model)
        with self._translated_errors():
            self._exec(sql.target_ddl(table, model))
            existing = self._columns(model.model_name)
            actual_key = self._primary_key(model.model_name)
        return plan_columns(model, self.name, table, existing, actual_key, sql.column_type, matches=sql.matches)

    def _apply_columns(self, model: ModelConfig, planned: ColumnChanges, state: ModelState) -> tuple[str, ...]:
        table = self.table(model)
        added = [c for c in model.columns if c.destination_name in planned.added]
        clauses = [sql.add_column(table, c).split(f"{table} ", 1)[1] for c in added]
        clauses += [sql.drop_column(table, name).split(f"{table} ", 1)[1] for name in planned.dropped]
        if not clauses:
            return ()
        with self._translated_errors():
            self._exec(f"ALTER TABLE {table} {', '.join(clauses)}")
        return tuple([f"added column {c.destination_name} ({c.data_type}) to {table}; rows delivered before "
                      "hold NULL in it until they change or a full refresh runs" for c in added]
                     + [f"dropped column {name} from {table} (no longer in the model)" for name in planned.dropped])
