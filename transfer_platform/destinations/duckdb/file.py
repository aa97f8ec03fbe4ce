"""The database file: opened read-write for a transfer (held until ``close``), read-only for a
read without side effects, waiting a while for another process's lock; statements run to their
end (DuckDB takes no other statement on a connection while a result is unfinished)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

from transfer_platform.errors import ConnectionFailure
from transfer_platform.storage.folders import folder_fix

if TYPE_CHECKING:
    import duckdb

    from transfer_platform.tuning import Tuning

#: while the file is locked by another process: the pause between attempts to open it
_RETRY_SECONDS = 0.2
#: a file that DuckDB cannot open as its database (another kind of file, a newer storage version)
NOT_A_DATABASE_FIX = ("the file at connection.path is not a DuckDB database this DuckDB can open: point "
                      "connection.path at a DuckDB database file, or at a path where no file exists yet "
                      "(the first transfer creates it)")


class DuckdbFile:
    """A writer's hold of its database file."""

    def __init__(self, path: Path, what: str, tuning: Tuning) -> None:
        self.path, self.what, self.tuning = path, what, tuning
        self._conn: duckdb.DuckDBPyConnection | None = None

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    @property
    def conn(self) -> duckdb.DuckDBPyConnection:
        """The file opened read-write, held until :meth:`close` (created if missing)."""
        if self._conn is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConnectionFailure(self.what, reason=exc.strerror or str(exc),
                                        fix=folder_fix(self.path.parent)) from None
            import duckdb

            try:
                self._conn = self.open(read_only=False)
            except duckdb.ConnectionException as exc:  # this process reads it read-only meanwhile
                raise ConnectionFailure(self.what, reason=first_line(exc),
                                        fix="wait for this process's read of the file (a dry run, an "
                                            "integrity check) to end, then run the transfer again") from None
        return self._conn

    def open(self, *, read_only: bool, wait: bool = True) -> duckdb.DuckDBPyConnection:
        """The file opened, waiting up to ``Tuning.lock_wait_seconds`` (``wait``) while another
        process holds it; then ``ConnectionFailure`` with DuckDB's message (the holder's PID)."""
        import duckdb

        deadline = time.monotonic() + (self.tuning.lock_wait_seconds if wait else 0)
        while True:
            try:
                conn = duckdb.connect(str(self.path), read_only=read_only)
                fetch_all(conn, "SET TimeZone = 'UTC'")
                return conn
            except duckdb.IOException as exc:
                reason = first_line(exc)
                if "not a valid duckdb database file" in reason.lower():
                    raise ConnectionFailure(self.what, reason=reason, fix=NOT_A_DATABASE_FIX) from None
                if "lock" not in reason.lower():
                    raise ConnectionFailure(self.what, reason=reason, fix=folder_fix(self.path.parent)) from None
                if time.monotonic() >= deadline:
                    raise ConnectionFailure(
                        self.what, reason=f"the file is locked by another process ({reason})",
                        fix="DuckDB lets one process write a file and no other process open it meanwhile: "
                            "close the other process's connection to this file (a reader or another "
                            "transfer: see its PID above; readers open the file between transfers), "
                            "then run the transfer again") from None
                time.sleep(_RETRY_SECONDS)
            except duckdb.ConnectionException:  # this process holds it with another configuration
                raise
            except duckdb.Error as exc:  # a newer storage version, ...
                raise ConnectionFailure(self.what, reason=first_line(exc), fix=NOT_A_DATABASE_FIX) from None

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection | None]:
        """A connection to read from: the writer's own while it holds the file, else the file
        opened read-only for the read (``None`` if there is no file: nothing was committed)."""
        import duckdb

        if self._conn is not None:
            yield self._conn
            return
        if not self.path.exists():
            yield None
            return
        try:
            conn = self.open(read_only=True)
        except duckdb.ConnectionException:  # this process holds it read-write (another writer)
            conn = self.open(read_only=False)
        try:
            yield conn
        finally:
            conn.close()

    def close(self) -> None:
        """Close the file (DuckDB checkpoints it: readers find every commit in the file alone)."""
        if self._conn is not None:
            with suppress(Exception):
                self._conn.close()
            self._conn = None


def fetch_all(conn: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[tuple]:
    """Run ``sql`` and fetch its whole result (DuckDB takes no other statement on a connection
    while a result is unfinished)."""
    return conn.execute(sql, params or []).fetchall()


def fetch_one(conn: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> tuple | None:
    rows = fetch_all(conn, sql, params)
    return rows[0] if rows else None


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
