"""The store's first tables: resources, API keys, the audit log, events, webhooks and their
deliveries, magic links.

Revision ID: 0001
Revises:
"""

from alembic import op

from transfer_platform.store import tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_ORDER = ("resources", "api_keys", "audit_log", "events", "webhooks", "webhook_deliveries", "magic_links")


def upgrade() -> None:
    bind = op.get_bind()
    for name in _ORDER:  # the tables as this revision defines them (the schema is the connection's)
        tables.metadata.tables[name].create(bind)


def downgrade() -> None:
    bind = op.get_bind()
    for name in reversed(_ORDER):
        tables.metadata.tables[name].drop(bind)
