"""The PostgreSQL destination: :mod:`.dialect` (every statement's text), :mod:`.writer` (the SQL
writer with COPY, the advisory lock, the empty-target swap and a refresh's publish), :mod:`.copy`
(the bulk load), :mod:`.probe` (test-connection)."""

from transfer_platform.destinations.postgres.copy import copy_batches, copy_partition
from transfer_platform.destinations.postgres.dialect import (
           REFRESH_PREFIX,
           STAGING_PREFIX,
           STATUS_TABLE,
)
from transfer_platform.destinations.postgres.writer import PostgresWriter

__all__ = ["REFRESH_PREFIX", "STAGING_PREFIX", "STATUS_TABLE", "PostgresWriter", "copy_batches",
           "copy_partition"]
