"""What PostgreSQL refuses, turned into errors that name the fix (a grant, a setting, a command)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from transfer_platform.core.sql import quote_ident
from transfer_platform.errors import ConnectionFailure, MissingPrivilege

if TYPE_CHECKING:
    from transfer_platform.vendors.postgres import PostgresDestination


def first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class Errors:
    """The writer's translations (a mixin of ``PostgresWriter``)."""

    destination: PostgresDestination
    schema: str
    what: str

    @contextmanager
    def _missing_privileges(self) -> Iterator[None]:
        """A refused statement becomes ``MissingPrivilege`` with the grant a loader needs."""
        import psycopg

        try:
            yield
        except psycopg.errors.InsufficientPrivilege as exc:
            connection = self.destination.connection
            schema, role = quote_ident(self.schema), quote_ident(connection.username)
            raise MissingPrivilege(
                self.what, role=connection.username, reason=first_line(exc),
                grant=f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {role} (the loader creates, alters, "
                      "drops and renames its tables there; tables created by another role must be "
                      f"owned by it: ALTER TABLE ... OWNER TO {role})",
            ) from None

    @contextmanager
    def _translated_errors(self) -> Iterator[None]:
        """:meth:`_missing_privileges`, and a lost connection as ``ConnectionFailure``."""
        import psycopg

        with self._missing_privileges():
            try:
                yield
            except psycopg.OperationalError as exc:
                connection = self.destination.connection
                raise ConnectionFailure(self.what, host=connection.host, port=connection.port,
                                        reason=first_line(exc)) from None
