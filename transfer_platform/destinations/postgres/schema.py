"""The destination schema, the status table, and the live table's columns: created when
missing, compared with the model's, brought to them (an added column added; a removed one
dropped only with ``allow_column_drop``; a changed type or primary key refused, with the advice
to run a full refresh). Every refusal comes before the first ``ALTER``."""

from __future__ import annotations

from contextlib import suppress
from typing import TYPE_CHECKING

from transfer_platform.core.columns import ColumnChanges, plan_columns
from transfer_platform.core.sql import quote_ident
from transfer_platform.destinations.postgres import sql
from transfer_platform.destinations.postgres.errors import first_line
from transfer_platform.errors import MissingPrivilege

if TYPE_CHECKING:
    import psycopg

    from transfer_platform.config.models import ModelConfig
    from transfer_platform.core.watermarks import ModelState
    from transfer_platform.vendors.postgres import PostgresDestination


class Schema:
    """The schema and the tables' columns (a mixin of ``PostgresWriter``)."""

    conn: psycopg.Connection
    destination: PostgresDestination
    name: str
    schema: str
    status_table: str
    what: str

    def _reach(self) -> None:
        """The schema and ``_transfer_status`` (with its ``refresh_state``), created if missing."""
        self._ensure_schema()
        self._ensure_status_table()
        if "refresh_state" not in self._columns(self.status_table):  # a table from an older version
            self.conn.execute(sql.add_refresh_state_column(self.status_table))

    def _ensure_schema(self) -> None:
        """Create the schema only when it is missing: PostgreSQL checks ``CREATE SCHEMA IF NOT
        EXISTS`` against the database's ``CREATE`` privilege even when the schema exists, which a
        loader that only has ``USAGE, CREATE`` on its own schema does not hold."""
        import psycopg

        exists = self.conn.execute(sql.SCHEMA_EXISTS, (self.schema,)).fetchone()[0]
        if exists:
            return
        try:
            self.conn.execute(sql.create_schema(self.schema))
        except (psycopg.errors.DuplicateSchema, psycopg.errors.UniqueViolation):
            pass  # another transfer created it meanwhile (a race shows as either)
        except psycopg.errors.InsufficientPrivilege as exc:
            connection = self.destination.connection
            raise MissingPrivilege(
                f"{self.what}: schema {self.schema!r} does not exist and cannot be created",
                role=connection.username, reason=first_line(exc),
                grant=(f"create it for the loader (CREATE SCHEMA {quote_ident(self.schema)} AUTHORIZATION "
                       f"{quote_ident(connection.username)}), or GRANT CREATE ON DATABASE "
                       f"{quote_ident(connection.database)} TO {quote_ident(connection.username)}"),
            ) from None

    def _ensure_status_table(self) -> None:
        """``CREATE TABLE IF NOT EXISTS`` of the status table, which two transfers starting on a new
        destination at once may both run (before any model's lock): PostgreSQL then refuses the
        second with a duplicate type or key, which means the table is there."""
        import psycopg

        with suppress(psycopg.errors.DuplicateObject, psycopg.errors.DuplicateTable, psycopg.errors.UniqueViolation):
            self.conn.execute(sql.status_ddl(self.status_table))  # or another transfer created it meanwhile

    def _columns(self, table: str) -> dict[str, str]:
        """Column name -> type as ``format_type`` writes it; empty if the table does not exist."""
        return dict(self.conn.execute(sql.COLUMNS, (table,)).fetchall())

    def _primary_key(self, table: str) -> list[str]:
        return [r[0] for r in self.conn.execute(sql.PRIMARY_KEY, (table,)).fetchall()]

    def _columns_match(self, model: ModelConfig, table: str) -> bool:
        expected = {c.destination_name: sql.column_type(c.data_type) for c in model.columns}
        return (self._columns(table) == expected
                and self._primary_key(table) == sorted(c.destination_name for c in model.primary_key))

    def _plan_columns(self, model: ModelConfig) -> ColumnChanges:
        """The live table created if missing; its columns compared with the model's: a changed
        type or primary key refused, a drop refused unless the model allows it."""
        table = self.table(model)
        self.conn.execute(sql.target_ddl(table, model))
        existing = self._columns(table)
        return plan_columns(model, self.name, table, existing, self._primary_key(table),
                            lambda column: sql.column_type(column.data_type))

    def _apply_columns(self, model: ModelConfig, planned: ColumnChanges, state: ModelState) -> tuple[str, ...]:
        """Bring the live table's columns to the model's, in one transaction."""
        table = self.table(model)
        added = [c for c in model.columns if c.destination_name in planned.added]
        changes = []
        with self.conn.transaction():
            for column in added:
                self.conn.execute(sql.add_column(table, column.destination_name, sql.column_type(column.data_type)))
                changes.append(f"added column {column.destination_name} ({column.data_type}) to {table}; "
                               "rows delivered before hold NULL in it until they change or a full "
                               "refresh runs")
            for name in planned.dropped:
                self.conn.execute(sql.drop_column(table, name))
                changes.append(f"dropped column {name} from {table} (no longer in the model)")
        return tuple(changes)
