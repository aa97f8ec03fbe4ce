"""The MySQL / MariaDB destination: :mod:`.dialect` (every statement's text), :mod:`.writer` (the
SQL writer with LOAD DATA, GET_LOCK, the type rules and the rename publish), :mod:`.load` (the
bulk load), :mod:`.probe` (test-connection), :mod:`.errors` (connecting, refusals named with
their grant)."""

from transfer_platform.destinations.mysql.dialect import (
    REFRESH_PREFIX,
    STAGING_PREFIX,
    STATUS_TABLE,
)
from transfer_platform.destinations.mysql.writer import MysqlWriter

__all__ = ["REFRESH_PREFIX", "STAGING_PREFIX", "STATUS_TABLE", "MysqlWriter"]
