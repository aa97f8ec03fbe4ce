"""The store's tables (SQLAlchemy Core). Alembic's migrations (``migrations/versions``) create them;
this module is what the code reads and writes through."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, UUID

metadata = sa.MetaData()
_now = sa.text("now()")

#: the four kinds of configuration entry the store holds, each a document as the file writes it
KINDS = ("source", "model", "recipient", "destination")

resources = sa.Table(
    "resources", metadata,
    sa.Column("id", UUID(as_uuid=False), primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("document", JSONB, nullable=False),  # the entry as the file writes it, secrets encrypted
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.UniqueConstraint("kind", "name", name="resources_kind_name"),
)

api_keys = sa.Table(
    "api_keys", metadata,
    sa.Column("id", UUID(as_uuid=False), primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("key_hash", sa.Text, nullable=False, unique=True),  # SHA-256 of the key (256 random bits)
    sa.Column("prefix", sa.Text, nullable=False),  # the key's first characters, to tell keys apart
    sa.Column("scope", sa.Text, nullable=False),  # read | transfers | admin (api/scopes.py)
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Column("revoked_at", sa.DateTime(timezone=True)),
)

audit_log = sa.Table(
    "audit_log", metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Column("actor", sa.Text, nullable=False),  # "api_key:<name>", "magic_link:<id>", "scoped_token:<id>", "cli"
    sa.Column("actor_scope", sa.Text),  # the key's scope, "form" for a link or scoped token, none for the CLI
    sa.Column("action", sa.Text, nullable=False),  # create, update, delete, link, cancel, pause, enable...
    sa.Column("resource_type", sa.Text, nullable=False),
    sa.Column("resource_id", sa.Text),
    sa.Column("resource_name", sa.Text),
    sa.Column("changes", JSONB, nullable=False),  # {field: {"from": ..., "to": ...}}, secrets masked
    sa.Index("audit_log_at", "at"),
)

events = sa.Table(  # the outbox webhooks deliver from: one row per event, its id the receiver's de-duplication key
    "events", metadata,
    sa.Column("id", UUID(as_uuid=False), primary_key=True),
    sa.Column("type", sa.Text, nullable=False),  # transfer.error, destination.created, ...
    sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Column("data", JSONB, nullable=False),
    sa.Column("dedup_key", sa.Text, unique=True),  # e.g. "transfer.error:<run id>": one event per fact
    sa.Index("events_occurred_at", "occurred_at"),
)

webhooks = sa.Table(
    "webhooks", metadata,
    sa.Column("id", UUID(as_uuid=False), primary_key=True),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("events", JSONB, nullable=False),  # the event types it receives
    sa.Column("format", sa.Text, nullable=False, server_default="generic"),  # generic | slack
    sa.Column("secret", sa.Text, nullable=False),  # the signing secret, encrypted
    sa.Column("is_enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
)

webhook_deliveries = sa.Table(
    "webhook_deliveries", metadata,
    sa.Column("event_id", UUID(as_uuid=False), sa.ForeignKey("events.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("webhook_id", UUID(as_uuid=False), sa.ForeignKey("webhooks.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("status", sa.Text, nullable=False, server_default="pending"),  # pending | delivered | failed
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Column("delivered_at", sa.DateTime(timezone=True)),
    sa.Column("last_error", sa.Text),
    sa.Index("webhook_deliveries_due", "status", "next_attempt_at"),
)

magic_links = sa.Table(
    "magic_links", metadata,
    sa.Column("id", UUID(as_uuid=False), primary_key=True),
    sa.Column("recipient", sa.Text, nullable=False),  # the recipient's name: the link's only scope
    sa.Column("token_hash", sa.Text, nullable=False, unique=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("used_at", sa.DateTime(timezone=True)),
    sa.Column("created_by", sa.Text, nullable=False),
    sa.Column("destination_name", sa.Text),  # what the recipient saved through it
    sa.Column("options", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),  # redirect_url, vendors, models
)

scoped_tokens = sa.Table(  # Prequel's scoped auth tokens: the destination form of one recipient, for a short while
    "scoped_tokens", metadata,
    sa.Column("id", UUID(as_uuid=False), primary_key=True),
    sa.Column("recipient", sa.Text, nullable=False),  # the recipient's name: the token's only scope
    sa.Column("token_hash", sa.Text, nullable=False, unique=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("created_by", sa.Text, nullable=False),
    sa.Column("options", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),  # application_origin
)

sharing_tokens = sa.Table(  # Delta Sharing: one bearer token per recipient (transfer_platform/sharing)
    "sharing_tokens", metadata,
    sa.Column("id", UUID(as_uuid=False), primary_key=True),
    sa.Column("recipient", sa.Text, nullable=False),  # the recipient's name: the token sees its shares only
    sa.Column("token_hash", sa.Text, nullable=False, unique=True),
    sa.Column("prefix", sa.Text, nullable=False),  # the token's first characters, to tell tokens apart
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("revoked_at", sa.DateTime(timezone=True)),  # revoked, or replaced by a rotation
    sa.Column("created_by", sa.Text, nullable=False),
    sa.Index("sharing_tokens_one_per_recipient", "recipient", unique=True,
             postgresql_where=sa.text("revoked_at IS NULL")),
)
