"""The DuckDB destination: :mod:`.dialect` (every statement's text), :mod:`.writer` (the SQL writer
staging in place: Parquet files or Arrow), :mod:`.file` (holding the database file), :mod:`.probe`
(test-connection)."""

from transfer_platform.destinations.duckdb.dialect import REFRESH_PREFIX, STATUS_TABLE
from transfer_platform.destinations.duckdb.writer import WORK_SUFFIX, DuckdbWriter

__all__ = ["REFRESH_PREFIX", "STATUS_TABLE", "WORK_SUFFIX", "DuckdbWriter"]
