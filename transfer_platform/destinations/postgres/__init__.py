"""The PostgreSQL destination: :mod:`.dialect` (every statement's text), :mod:`.writer` (COPY, the
advisory lock, the empty-target swap, a refresh's publish), :mod:`.copy` (the bulk load), :mod:`.probe`."""

from transfer_platform.destinations.postgres.copy import copy_batches, copy_partition
from transfer_platform.destinations.postgres.writer import PostgresWriter
from transfer_platform.destinations.sql.dialect import REFRESH_PREFIX, STAGING_PREFIX, STATUS_TABLE

__all__ = ["REFRESH_PREFIX", "STAGING_PREFIX", "STATUS_TABLE", "PostgresWriter", "copy_batches", "copy_partition"]
