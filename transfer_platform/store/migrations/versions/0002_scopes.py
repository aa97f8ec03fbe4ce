"""Scoped credentials: each API key's scope (the keys made before scopes existed become ``admin``,
what they could do), the scope of each audit entry's actor, and the one-recipient scoped tokens.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # existing keys could do everything: they keep doing it (the default fills them, then goes, so
    # a key made without a scope is refused by the database rather than made admin)
    op.add_column("api_keys", sa.Column("scope", sa.Text(), server_default="admin", nullable=False))
    op.alter_column("api_keys", "scope", server_default=None)
    op.add_column("audit_log", sa.Column("actor_scope", sa.Text(), nullable=True))
    op.create_table("scoped_tokens",
    sa.Column("id", sa.UUID(as_uuid=False), nullable=False),
    sa.Column("recipient", sa.Text(), nullable=False),
    sa.Column("token_hash", sa.Text(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("created_by", sa.Text(), nullable=False),
    sa.Column("options", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"),
              nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("token_hash")
    )


def downgrade() -> None:
    op.drop_table("scoped_tokens")
    op.drop_column("audit_log", "actor_scope")
    op.drop_column("api_keys", "scope")
