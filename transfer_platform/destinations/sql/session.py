"""One small session per driver: how a :class:`~.writer.SqlWriter` runs a statement, fetches
its rows and opens a transaction. psycopg, PyMySQL, DuckDB, clickhouse-connect, the Snowflake
connector and the BigQuery client each have theirs; the writer never calls a driver itself."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from transfer_platform.core.timeutil import utc
from transfer_platform.destinations.sql.dialect import backslashed

if TYPE_CHECKING:
    from transfer_platform.destinations.sql.dialect import Statement


def _split(statement: Statement) -> tuple[str, Any]:
    return (statement, None) if isinstance(statement, str) else statement


class Session:
    """A connection as the SQL writer uses it (autocommit outside :meth:`transaction`)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn  # the driver's connection

    def execute(self, statement: Statement) -> int:
        """Run ``statement``; the rows it changed."""
        raise NotImplementedError

    def all(self, statement: Statement) -> list[tuple]:
        raise NotImplementedError

    def one(self, statement: Statement) -> tuple | None:
        rows = self.all(statement)
        return rows[0] if rows else None

    def begin(self) -> None:
        """Begin a transaction (a driver without ``begin`` runs its statement)."""
        self.conn.begin()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction of :meth:`begin` and the driver's ``commit`` and ``rollback`` (psycopg's
        nests, as savepoints)."""
        self.begin()
        try:
            yield
        except BaseException:
            with suppress(Exception):  # the connection may be gone: the first error is the one told
                self.conn.rollback()
            raise
        self.conn.commit()


class PsycopgSession(Session):
    def execute(self, statement: Statement) -> int:
        return self.conn.execute(*_split(statement)).rowcount

    def all(self, statement: Statement) -> list[tuple]:
        return self.conn.execute(*_split(statement)).fetchall()

    def one(self, statement: Statement) -> tuple | None:
        return self.conn.execute(*_split(statement)).fetchone()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.conn.transaction():
            yield


def mysql_param(value: object) -> object:
    """A parameter as MySQL takes it: a datetime as naive UTC (the session is in UTC)."""
    if isinstance(value, datetime):
        return utc(value).replace(tzinfo=None)
    return value


class PymysqlSession(Session):
    def _run(self, cursor: Any, statement: Statement) -> int:
        text, params = _split(statement)
        return cursor.execute(text, None if params is None else tuple(mysql_param(p) for p in params))

    def execute(self, statement: Statement) -> int:
        with self.conn.cursor() as cursor:
            return self._run(cursor, statement)

    def all(self, statement: Statement) -> list[tuple]:
        with self.conn.cursor() as cursor:
            self._run(cursor, statement)
            return list(cursor.fetchall())


class DuckdbSession(Session):
    """Every result fetched whole (DuckDB takes no other statement on a connection while a result
    is unfinished)."""

    def execute(self, statement: Statement) -> int:
        rows = self.all(statement)  # DML answers one row: the rows changed
        return int(rows[0][0]) if rows and len(rows[0]) == 1 and isinstance(rows[0][0], int) else 0

    def all(self, statement: Statement) -> list[tuple]:
        text, params = _split(statement)
        return self.conn.execute(text, list(params or [])).fetchall()


def clickhouse_param(value: object) -> object:
    """A parameter as ClickHouse takes it: a moment as UTC text to the microsecond (clickhouse-connect's
    own binding stops at the second), a date as ISO text."""
    if isinstance(value, datetime):
        return utc(value).strftime("%Y-%m-%d %H:%M:%S.%f")
    return value.isoformat() if isinstance(value, date) else value


class ClickhouseSession(Session):
    """Statements one at a time: ClickHouse has no multi-statement transactions (the writer's
    ``_atomically`` says how a window still becomes visible at once)."""

    def _run(self, run: Any, statement: Statement) -> Any:
        text, params = _split(statement)
        return run(text, None if params is None else {k: clickhouse_param(v) for k, v in dict(params).items()})

    def execute(self, statement: Statement) -> int:
        return int(getattr(self._run(self.conn.command, statement), "written_rows", 0) or 0)

    def all(self, statement: Statement) -> list[tuple]:
        """The rows, a DateTime64 (read back naive, in UTC) as an aware moment."""
        return [tuple(utc(v) if isinstance(v, datetime) else v for v in row)
                for row in self._run(self.conn.query, statement).result_rows]

    @contextmanager
    def transaction(self) -> Iterator[None]:
        yield


class SnowflakeSession(Session):
    """Autocommit outside :meth:`transaction`, which begins with ``BEGIN``."""

    def execute(self, statement: Statement) -> int:
        with self.conn.cursor() as cursor:
            cursor.execute(*_split(statement))
            return int(cursor.rowcount or 0)

    def all(self, statement: Statement) -> list[tuple]:
        with self.conn.cursor() as cursor:
            cursor.execute(*_split(statement))
            return [tuple(row) for row in cursor.fetchall()]

    def begin(self) -> None:
        self.execute("BEGIN")


#: how long one BigQuery API call may keep retrying a connection that fails (the client's default: 600 s)
BIGQUERY_RETRY_SECONDS = 20.0


def bigquery_retry() -> Any:
    from google.cloud.bigquery import DEFAULT_RETRY

    return DEFAULT_RETRY.with_deadline(BIGQUERY_RETRY_SECONDS)


#: a parameter's literal by its Python type: the writer's are text, integers (a last-modified epoch),
#: moments and dates (a datetime before a date: a subclass)
_BIGQUERY_LITERALS = ((int, str), (datetime, lambda v: f"TIMESTAMP {backslashed(utc(v).isoformat())}"),
                      (date, lambda v: f"DATE {backslashed(v.isoformat())}"))


def bigquery_literal(value: Any) -> str:
    """A parameter as BigQuery takes it: a literal in the text (the emulator the tests use takes no
    query parameters)."""
    return "NULL" if value is None else next((text(value) for kind, text in _BIGQUERY_LITERALS
                                              if isinstance(value, kind)), backslashed(str(value)))


class BigquerySession(Session):
    """Each statement one query job, its own commit: the emulator has no multi-statement
    transaction, so :meth:`transaction` groups nothing (the writer's order keeps a window whole)."""

    transaction = ClickhouseSession.transaction

    def _run(self, statement: Statement) -> tuple[Any, Any]:
        text, params = _split(statement)
        if params:  # one part more than the parameters (else zip refuses)
            parts = text.split("%s")
            text = parts[0] + "".join(bigquery_literal(value) + part for value, part in zip(params, parts[1:], strict=True))
        job = self.conn.query(text, retry=bigquery_retry(), job_retry=None)
        return job, job.result(retry=bigquery_retry())

    def execute(self, statement: Statement) -> int:
        """The rows a DML statement changed, or the number a query counts (one row, one value)."""
        job, rows = self._run(statement)
        return int(next(iter(rows))[0]) if job.statement_type == "SELECT" else int(job.num_dml_affected_rows or 0)

    def all(self, statement: Statement) -> list[tuple]:
        return [tuple(row.values()) for row in self._run(statement)[1]]
