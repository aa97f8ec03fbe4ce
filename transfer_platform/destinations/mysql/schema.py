"""The status table, and the live table's columns: created when missing, compared with the
model's, brought to them (an added column added; a removed one dropped only with
``allow_column_drop``; a changed type or primary key refused, naming the full refresh that fixes
it). Every refusal comes before the one ``ALTER TABLE`` (a single statement: all its changes or
none)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.core.columns import ColumnChanges, column_changes, refuse_column_drops
from transfer_platform.destinations.mysql import sql
from transfer_platform.destinations.mysql.errors import full_refresh_fix
from transfer_platform.errors import SchemaMismatch

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
        where = f"model '{model.model_name}' -> destination '{self.name}'"
        fix = full_refresh_fix(self.name, model.model_name)
        for column in model.columns:
            expected = sql.column_type(column)
            actual = existing.get(column.destination_name)
            if actual is not None and not sql.matches(expected, actual):
                raise SchemaMismatch(
                    f"{where}: column '{column.destination_name}' is {actual} in {table} but the model "
                    f"says {column.data_type} ({expected}); a type is never changed in place. Fix: {fix}")
        wanted_key = sorted(c.destination_name for c in model.primary_key)
        if actual_key != wanted_key:
            raise SchemaMismatch(
                f"{where}: the primary key of {table} is ({', '.join(actual_key)}) but the model's is "
                f"({', '.join(wanted_key)}). Fix: {fix}")
        planned = column_changes(list(existing), [c.destination_name for c in model.columns])
        refuse_column_drops(model.model_name, self.name, table, planned.dropped, allowed=model.allow_column_drop)
        return planned

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
