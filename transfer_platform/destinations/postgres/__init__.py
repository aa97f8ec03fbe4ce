"""The PostgreSQL destination, by job: :mod:`.writer` (the writer and its connection),
:mod:`.sql` (every statement's text), :mod:`.schema`, :mod:`.state`, :mod:`.staging`,
:mod:`.copy`, :mod:`.merge`, :mod:`.refresh`, :mod:`.locks`, :mod:`.probe`, :mod:`.errors`."""

from transfer_platform.destinations.postgres.copy import copy_batches, copy_partition
from transfer_platform.destinations.postgres.sql import REFRESH_PREFIX, STAGING_PREFIX, STATUS_TABLE
from transfer_platform.destinations.postgres.writer import PostgresWriter

__all__ = ["REFRESH_PREFIX", "STAGING_PREFIX", "STATUS_TABLE", "PostgresWriter", "copy_batches",
           "copy_partition"]
