"""Delta Sharing: each recipient's bearer token (its SHA-256, its prefix, when it expires or was
revoked).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("sharing_tokens",
    sa.Column("id", sa.UUID(as_uuid=False), nullable=False),
    sa.Column("recipient", sa.Text(), nullable=False),
    sa.Column("token_hash", sa.Text(), nullable=False),
    sa.Column("prefix", sa.Text(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("created_by", sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("token_hash")
    )
    # at most one live (unrevoked) token per recipient
    op.create_index("sharing_tokens_one_per_recipient", "sharing_tokens", ["recipient"], unique=True,
                    postgresql_where=sa.text("revoked_at IS NULL"))


def downgrade() -> None:
    op.drop_index("sharing_tokens_one_per_recipient", table_name="sharing_tokens")
    op.drop_table("sharing_tokens")
