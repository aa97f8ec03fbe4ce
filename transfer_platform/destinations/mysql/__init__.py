"""The MySQL / MariaDB destination, by job: :mod:`.writer` (the writer and its connection),
:mod:`.sql` (every statement's text), :mod:`.schema`, :mod:`.state`, :mod:`.staging`,
:mod:`.load`, :mod:`.merge`, :mod:`.refresh`, :mod:`.locks`, :mod:`.probe`, :mod:`.errors`."""

from transfer_platform.destinations.mysql.sql import REFRESH_PREFIX, STAGING_PREFIX, STATUS_TABLE
from transfer_platform.destinations.mysql.writer import MysqlWriter

__all__ = ["REFRESH_PREFIX", "STAGING_PREFIX", "STATUS_TABLE", "MysqlWriter"]
