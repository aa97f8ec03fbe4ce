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

    from transfer_platform.storage.locks import FolderLocks
    from transfer_platform.tuning import Tuning

#: while the file is locked by another process: the pause between attempts to open it
_RETRY_SECONDS = 0.2


class File:
    """The writer's hold of its file (a mixin of ``DuckdbWriter``)."""

    path: Path
    what: str
    tuning: Tuning
    _conn: duckdb.DuckDBPyConnection | None
    _locks: FolderLocks

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
                self._conn = self._open(read_only=False)
            except duckdb.ConnectionException as exc:  # this process reads it read-only meanwhile
                raise ConnectionFailure(self.what, reason=first_line(exc),
                                        fix="wait for this process's read of the file (a dry run, an "
                                            "integrity check) to end, then run the transfer again") from None
        return self._conn

    def _open(self, *, read_only: bool, wait: bool = True) -> duckdb.DuckDBPyConnection:
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
            except duckdb.Error as exc:  # not a DuckDB file, a newer storage version, ...
                raise ConnectionFailure(self.what, reason=first_line(exc),
                                        fix="point connection.path at a DuckDB database file (or a path "
                                            "where none exists yet)") from None

    @contextmanager
    def _read(self) -> Iterator[duckdb.DuckDBPyConnection | None]:
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
            conn = self._open(read_only=True)
        except duckdb.ConnectionException:  # this process holds it read-write (another writer)
            conn = self._open(read_only=False)
        try:
            yield conn
        finally:
            conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        conn = self.conn
        conn.begin()
        try:
            yield conn
        except BaseException:
            with suppress(Exception):
                conn.rollback()
            raise
        conn.commit()

    def check(self) -> None:
        fetch_all(self.conn, "SELECT 1")

    def close(self) -> None:
        """Close the file (DuckDB checkpoints it: readers find every commit in the file alone)
        and release the models' locks."""
        if self._conn is not None:
            with suppress(Exception):
                self._conn.close()
            self._conn = None
        self._locks.release_all()

    def __del__(self) -> None:  # a writer dropped without close() still releases the file
        if getattr(self, "_conn", None) is not None or getattr(self, "_locks", None):
            self.close()


def fetch_all(conn: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[tuple]:
    """Run ``sql`` and fetch its whole result (DuckDB takes no other statement on a connection
    while a result is unfinished)."""
    return conn.execute(sql, params or []).fetchall()


def fetch_one(conn: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> tuple | None:
    rows = fetch_all(conn, sql, params)
    return rows[0] if rows else None


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
