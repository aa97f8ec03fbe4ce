"""``test-connection`` of a PostgreSQL destination: reach, log in, then everything a transfer does
in the schema, tried in one transaction that is rolled back."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from transfer_platform.connections import connect_postgres
from transfer_platform.core.sql import qualified, quote_ident
from transfer_platform.destinations.postgres import sql
from transfer_platform.errors import ConfigError, ConnectionFailure

if TYPE_CHECKING:
    import psycopg

    from transfer_platform.config.models import ModelConfig
    from transfer_platform.probes import Check, Probe
    from transfer_platform.vendors.postgres import PostgresDestination


class Probing:
    """The probe (a mixin of ``PostgresWriter``)."""

    destination: PostgresDestination
    schema: str
    status_table: str
    what: str

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        """Reach, log in, then everything a transfer does in the schema, tried in one transaction
        that is rolled back (PostgreSQL's DDL is transactional: nothing is left behind, not even
        a schema created for the probe); the models' existing tables must be the loader's."""
        from transfer_platform.probes import Probe

        probe = Probe(target)
        connection = self.destination.connection
        role, schema = quote_ident(connection.username), quote_ident(self.schema)
        steps = sql.probe_steps(self.schema, "_tp_probe_" + uuid.uuid4().hex[:12])
        owned = [f"own the model tables and {sql.STATUS_TABLE} in schema {schema}"]
        login = f"log in to database {connection.database!r} as {connection.username!r}"
        if not probe.reach(connection.host, connection.port):
            probe.skipped([login, *[name for name, _ in steps], *owned], "the server cannot be reached")
            return probe.checks
        try:
            conn = connect_postgres(connection, what=self.what)
        except (ConnectionFailure, ConfigError) as exc:
            probe.failed(login, getattr(exc, "reason", None) or str(exc).splitlines()[-1].strip(),
                         "check username, database and the password's environment variable")
            probe.skipped([name for name, _ in steps] + owned, "cannot log in")
            return probe.checks
        probe.passed(login)
        with conn:
            self._probe_schema(conn, probe, steps, role, schema)
            self._probe_ownership(conn, probe, models, owned[0], role)
            conn.rollback()
        return probe.checks

    def _probe_schema(self, conn: psycopg.Connection, probe: Probe, steps: list, role: str, schema: str) -> None:
        import psycopg

        connection = self.destination.connection
        (exists,) = conn.execute(sql.SCHEMA_EXISTS, (self.schema,)).fetchone()
        for index, (name, statements) in enumerate(steps):
            if index == 0 and exists:
                continue  # the schema is there: the loader does not need to create it
            try:
                with conn.transaction():
                    for statement in statements:
                        conn.execute(statement)
            except psycopg.Error as exc:
                fix = (f"CREATE SCHEMA {schema} AUTHORIZATION {role} (as an administrator), or GRANT "
                       f"CREATE ON DATABASE {quote_ident(connection.database)} TO {role}" if index == 0
                       else f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {role}")
                probe.failed(name, str(exc).strip().splitlines()[0], fix)
                probe.skipped([later for later, _ in steps[index + 1:]], "the step before failed")
                return
            probe.passed(name, "it does not exist yet; the first transfer creates it" if index == 0 else "")

    def _probe_ownership(self, conn: psycopg.Connection, probe: Probe, models: list[ModelConfig],
                         name: str, role: str) -> None:
        """A table of another role cannot be altered or dropped by the loader (evolution, full
        refresh): each existing model table, refresh table and the status table must be its."""
        tables = [self.status_table] + [t for m in models for t in (self.table(m), self.refresh_table(m))]
        foreign = [qualified(*row) for row in conn.execute(sql.not_owned(len(tables)), tables).fetchall()]
        if foreign:
            probe.failed(name, f"owned by another role: {', '.join(foreign)}",
                         "; ".join(f"ALTER TABLE {t} OWNER TO {role}" for t in foreign))
        else:
            probe.passed(name)
