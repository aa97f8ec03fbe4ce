"""The DuckDB destination, by job: :mod:`.writer` (the writer: a transfer's steps, windows,
refresh, delete sweep), :mod:`.file` (holding the database file), :mod:`.catalog` (names, columns,
states), :mod:`.probe` (test-connection)."""

from transfer_platform.destinations.duckdb.catalog import REFRESH_PREFIX, STATUS_TABLE
from transfer_platform.destinations.duckdb.writer import WORK_SUFFIX, DuckdbWriter

__all__ = ["REFRESH_PREFIX", "STATUS_TABLE", "WORK_SUFFIX", "DuckdbWriter"]
