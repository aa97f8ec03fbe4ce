"""Alembic's environment for the store: run by :func:`transfer_platform.store.database.migrate`,
which hands it an open connection and the store's schema."""

from alembic import context

from transfer_platform.store.tables import metadata

connection = context.config.attributes["connection"]
schema = context.config.attributes["schema"]
context.configure(connection=connection, target_metadata=metadata, version_table="alembic_version",
                  version_table_schema=schema)
with context.begin_transaction():
    context.run_migrations()
