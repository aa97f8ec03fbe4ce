"""The store's migrations: they create exactly the tables the code reads and writes
(``store/tables.py``), run twice without harm, and leave the version in the store's own schema."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from transfer_platform.config.connection_settings import DatabaseConnection
from transfer_platform.store.database import engine_for, migrate
from transfer_platform.store.tables import metadata
from transfer_platform_tests.support.postgres import pg_connection_config


def test_the_migrations_build_what_the_code_uses(store_schema: str) -> None:
    connection = DatabaseConnection.model_validate(pg_connection_config(store_schema))
    first = migrate(connection)
    assert migrate(connection) == first  # a second run changes nothing
    with engine_for(connection).connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table_schema": store_schema})
        differences = [d for d in compare_metadata(context, metadata)
                       if not (d[0] == "remove_table" and d[1].name == "alembic_version")]
        assert differences == [], f"store/tables.py and the migrations differ: {differences}"
        schema_of_version = conn.execute(sa.text(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'alembic_version' "
            "AND table_schema = :schema"), {"schema": store_schema}).scalar()
        assert schema_of_version == store_schema
