"""The PostgreSQL destination: :mod:`.dialect` (every statement's text) and :mod:`.writer` (the rest)."""

from transfer_platform.destinations.postgres.writer import PostgresWriter
from transfer_platform.destinations.sql.dialect import REFRESH_PREFIX, STAGING_PREFIX, STATUS_TABLE

__all__ = ["REFRESH_PREFIX", "STAGING_PREFIX", "STATUS_TABLE", "PostgresWriter"]
