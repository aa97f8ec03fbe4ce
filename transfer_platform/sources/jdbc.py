"""Database sources through Spark's JDBC reader: PostgreSQL and MySQL/MariaDB.

One reader, parameterised by a dialect. A window of one tenant is read as one query, sent as
Spark's ``dbtable`` so that the database applies the filters (and can use its indexes)::

    SELECT <columns> FROM <relation> WHERE <tenant> AND ((lm >= lower AND lm < upper) OR lm IS NULL)

``<relation>`` is ``source_table`` or ``(source_query) AS tp_source_query``: the change and
tenant predicates always apply outside a custom query. Tenancy:

- ``multi_tenant``: ``<tenant>`` is ``organization_column = <escaped literal>``. MySQL compares
  with the column's collation, which is usually case-, accent- and trailing-space-insensitive,
  so Spark keeps only the rows whose id is exactly the tenant's (the SQL predicate still narrows
  the read and uses the index; Spark's own filter pushdown is off, so Spark applies that filter).
- ``schema_tenanted``: no tenant predicate; each recipient's rows live in the schema (MySQL:
  database) named by its ``id_in_provider_system``. ``source_table`` is the table's name in that
  schema and is qualified with it. For a ``source_query`` unqualified names resolve in the
  tenant's schema: PostgreSQL's ``currentSchema`` connection property (the ``search_path`` from
  the connection's start), MySQL's JDBC URL database. It has to be the connection's, not a
  ``sessionInitStatement``: Spark resolves the query's columns on a connection that never runs
  that statement.

A multi-tenant PostgreSQL source's ``connection.schema`` is its ``currentSchema`` the same way:
an unqualified ``source_table`` or a ``source_query``'s unqualified tables resolve in it.

The session time zone is UTC (``sessionInitStatement``), so ``timestamptz``/MySQL ``TIMESTAMP``
values and the UTC bounds agree; ``timestamp``/``DATETIME`` values are read as UTC. With
``max_concurrent_queries_per_transfer > 1`` the read is split on the last-modified column between
the window's bounds: no ``min()/max()`` query is needed.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import quote

from transfer_platform.config.connection_settings import DatabaseConnection
from transfer_platform.config.models import ModelConfig
from transfer_platform.core.routes import Route
from transfer_platform.core.sql import (
    change_predicate,
    derived_table,
    qualified,
    quote_ident,
    quote_literal,
    search_path_value,
    source_select,
    tenant_predicate,
    wrap_source_query,
)
from transfer_platform.core.timeutil import EPOCH
from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.errors import (
    ConfigError,
    ConnectionFailure,
    DataError,
    Problem,
    TransferPlatformError,
)
from transfer_platform.runtime.connections import (
    CONNECT_TIMEOUT_SECONDS,
    connect_mysql,
    connect_postgres,
    jdbc_properties,
    mysql_jdbc_url,
    postgres_jdbc_url,
    spark_error_reason,
)
from transfer_platform.runtime.read_timeouts import ReadDeadline, SourceStalled, is_stall, stalled
from transfer_platform.runtime.spark_session import server_lost
from transfer_platform.sources.base import (
    WINDOW_COLUMN,
    ReadRequest,
    SourceReader,
    analyzed,
    check_last_modified_type,
    columns_mismatch,
    for_destination,
    missing_columns,
    model_columns,
    required_columns,
    spark_col,
)
from transfer_platform.vendors import mysql, postgres
from transfer_platform.vendors.mysql import MysqlSource
from transfer_platform.vendors.postgres import PostgresSource

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.probes import Check, Probe
    from transfer_platform.sources.direct import DirectReads

#: MySQL's "access denied" errors: to a database, a table, a column
_LOG = logging.getLogger("transfer_platform.sources")
_MYSQL_PRIVILEGE_ERRORS = frozenset({1044, 1142, 1143})
FETCH_SIZE = 10_000
COUNT_COLUMN = "tp_rows"
_TIMESTAMP_BOUND_FORMAT = "%Y-%m-%d %H:%M:%S.%f"

#: statements this process sent to each source, by ``(source, kind)``: ``rows`` (a read or a count
#: of a model's rows), ``schema`` (a read's columns, asked with no row), ``catalog`` (the unique
#: index question). Metrics only: what the source-staging benchmark and tests count.
SOURCE_STATEMENTS: Counter[tuple[str, str]] = Counter()
_STATEMENTS_LOCK = threading.Lock()


def window_counts(found: list[tuple], windows: int, up_to: int) -> list[int]:
    """Each window's count from the rows of :meth:`JdbcReader.window_rows_sql`."""
    by_window = {int(window): int(n) for window, n in found}
    return [by_window.get(i, up_to) for i in range(windows)]


def count_statement(source: str, kind: str) -> None:
    with _STATEMENTS_LOCK:
        SOURCE_STATEMENTS[(source, kind)] += 1


class PostgresDialect:
    label = "PostgreSQL"
    text = postgres.SQL_TEXT  # names and literals, as the destination writes them too
    driver = "org.postgresql.Driver"
    session_init = "SET TIME ZONE 'UTC'"
    refuses_missing_tables = False  # a missing table is "does not exist", whatever the rights
    case_sensitive_columns = True  # the query quotes every name
    exact_tenant_match_in_spark = False  # deterministic collations compare exactly
    #: the source types (by OID) a small read takes as they are, each with the data_type that reads
    #: it unchanged (sources/direct.py): boolean, smallint, integer, bigint, text, varchar, double
    #: precision, date, timestamptz
    direct_types = {16: "boolean", 21: "integer", 23: "integer", 20: "integer", 25: "string", 1043: "string",
                    701: "float", 1082: "date", 1184: "timestamp"}

    def __init__(self, read_timeout: int) -> None:
        self.read_timeout = read_timeout  # the source's read_timeout_seconds

    @contextmanager
    def _connected(self, connection: DatabaseConnection, what: str) -> Iterator[psycopg.Connection]:
        """A connection whose calls, together, wait at most the read timeout
        (:class:`~transfer_platform.runtime.read_timeouts.ReadDeadline`)."""
        with connect_postgres(connection, what=what) as conn:
            try:
                with ReadDeadline(conn, self.read_timeout):
                    yield conn
            except SourceStalled:
                raise stalled(what, connection, self.read_timeout) from None

    def url(self, connection: DatabaseConnection, default_schema: str | None) -> str:
        # prepareThreshold=-1: a server-prepared statement from the first execution, so rows arrive
        # in the binary format (timestamps as microsecond integers): about 25 % less CPU per row;
        # socketTimeout (seconds): the read timeout, in the URL as the schema below
        url = postgres_jdbc_url(connection) + f"?prepareThreshold=-1&socketTimeout={self.read_timeout}"
        if default_schema is not None:  # in the URL: Spark Connect lower-cases option names
            url += "&currentSchema=" + quote(search_path_value(default_schema), safe="")
        return url

    def search_schema(self, connection: DatabaseConnection) -> str | None:
        """Where a multi-tenant source's unqualified names resolve: ``connection.schema``."""
        return connection.schema_

    def table_schema(self, connection: DatabaseConnection) -> str:
        """The schema of an unqualified ``source_table`` (named in a grant)."""
        return connection.schema_ or "public"

    def ping(self, connection: DatabaseConnection, what: str) -> None:
        with self._connected(connection, what) as conn:
            conn.execute("SELECT 1")

    login = ping

    def try_query(self, connection: DatabaseConnection, what: str, sql: str,
                  default_schema: str | None) -> str | None:
        """Run ``sql`` in a READ ONLY transaction that is rolled back; the refusal, or ``None``."""
        import psycopg

        with self._connected(connection, what) as conn:
            try:
                conn.execute("SET TRANSACTION READ ONLY")
                if default_schema is not None:
                    conn.execute("SELECT set_config('search_path', %s, true)", (search_path_value(default_schema),))
                conn.execute(sql)
            except psycopg.errors.InsufficientPrivilege as exc:
                return "refused: " + str(exc).strip().splitlines()[0]
            except psycopg.Error as exc:
                return str(exc).strip().splitlines()[0]
            finally:
                conn.rollback()
        return None

    def select_rows(self, connection: DatabaseConnection, what: str, sql: str,
                    default_schema: str | None) -> list[tuple]:
        """The rows of ``sql``, run in a READ ONLY transaction (then rolled back)."""
        with self._connected(connection, what) as conn:
            conn.execute("SET TRANSACTION READ ONLY")
            if default_schema is not None:
                conn.execute("SELECT set_config('search_path', %s, true)", (search_path_value(default_schema),))
            rows = conn.execute(sql).fetchall()
            conn.rollback()
        return rows

    def unique_key_sql(self, relation: str, schema: str | None, table: str, keys: list[str]) -> str:
        """Whether a unique index (no predicate, no expression) of ``relation`` has only key
        columns among its key columns: one row per key value then."""
        names = "ARRAY[" + ", ".join(quote_literal(k) for k in keys) + "]::text[]"
        return ("SELECT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = to_regclass("
                f"{quote_literal(relation)}) AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL "
                "AND NOT EXISTS (SELECT 1 FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
                f"WHERE k.n <= i.indnkeyatts AND NOT (a.attname::text = ANY({names}))))")

    def grant(self, connection: DatabaseConnection, schema: str, table: str, columns: list[str],
              refused: str) -> str:
        role = quote_ident(connection.username)
        names = ", ".join(quote_ident(c) for c in columns)
        return (f"GRANT USAGE ON SCHEMA {quote_ident(schema)} TO {role}; "
                f"GRANT SELECT ({names}) ON {qualified(schema, table)} TO {role}")


class MysqlDialect:
    label = "MySQL"
    text = mysql.SQL_TEXT  # names and literals, as the destination writes them too
    driver = "org.mariadb.jdbc.Driver"  # Debian's libmariadb-java; it also speaks to MySQL
    session_init = "SET time_zone = '+00:00'"
    direct_types: dict[int, str] = {}  # every read goes through Spark (sources/direct.py)
    #: a table the user has no right on is refused alike whether it exists or not
    refuses_missing_tables = True
    case_sensitive_columns = False
    exact_tenant_match_in_spark = True  # _ci collations: 'ACME' = 'acme ' = 'acmé' is true

    def __init__(self, read_timeout: int) -> None:
        self.read_timeout = read_timeout  # the source's read_timeout_seconds

    def url(self, connection: DatabaseConnection, default_schema: str | None) -> str:
        # socketTimeout (milliseconds): the read timeout, in the URL (Spark Connect lower-cases
        # option names, which the driver would not know); a database name holds no '?' (refused)
        return mysql_jdbc_url(connection, default_schema) + f"?socketTimeout={self.read_timeout * 1000}"

    def search_schema(self, connection: DatabaseConnection) -> str | None:
        """None: unqualified names resolve in connection.database (``schema`` is refused)."""
        return None

    def table_schema(self, connection: DatabaseConnection) -> str:
        """The database of an unqualified ``source_table`` (named in a grant)."""
        return connection.schema_ or connection.database

    def ping(self, connection: DatabaseConnection, what: str) -> None:
        with connect_mysql(connection, what=what, read_timeout=self.read_timeout) as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")

    def login(self, connection: DatabaseConnection, what: str) -> None:
        """Authenticate without choosing a database: a reader whose only rights are on the model's
        tables logs in; a database it may not use is a refused read, reported with the grant."""
        with connect_mysql(connection.model_copy(update={"database": ""}), what=what, read_timeout=self.read_timeout) as conn:
            conn.ping()

    def try_query(self, connection: DatabaseConnection, what: str, sql: str,
                  default_schema: str | None) -> str | None:
        """Run ``sql`` in a READ ONLY transaction that is rolled back; the refusal, or ``None``."""
        import pymysql

        try:
            conn = connect_mysql(connection, what=what, read_timeout=self.read_timeout, database=default_schema)
        except ConnectionFailure as exc:  # the tenant's database is missing or not granted
            return ("refused: " if "Access denied" in exc.reason else "") + exc.reason
        with conn, conn.cursor() as cur:
            try:
                cur.execute("START TRANSACTION READ ONLY")
                cur.execute(sql)
            except pymysql.Error as exc:
                code, message = (exc.args + ("",))[:2] if exc.args else (0, str(exc))
                return ("refused: " if code in _MYSQL_PRIVILEGE_ERRORS else "") + str(message)
            finally:
                conn.rollback()
        return None

    def select_rows(self, connection: DatabaseConnection, what: str, sql: str,
                    default_schema: str | None) -> list[tuple]:
        """The rows of ``sql``, run in a READ ONLY transaction (then rolled back)."""
        conn = connect_mysql(connection, what=what, read_timeout=self.read_timeout, database=default_schema)
        with conn, conn.cursor() as cur:
            cur.execute("START TRANSACTION READ ONLY")
            cur.execute(sql)
            rows = list(cur.fetchall())
            conn.rollback()
        return rows

    def unique_key_sql(self, relation: str, schema: str | None, table: str, keys: list[str]) -> str:
        """Whether a unique index of ``schema.table`` (the connection's database if ``None``) has
        only key columns (compared as MySQL compares column names: case-insensitively)."""
        names = ", ".join(quote_literal(k, self.text) for k in keys)
        where = "DATABASE()" if schema is None else quote_literal(schema, self.text)
        return ("SELECT COUNT(*) > 0 FROM (SELECT INDEX_NAME FROM information_schema.STATISTICS "
                f"WHERE TABLE_SCHEMA = {where} AND TABLE_NAME = {quote_literal(table, self.text)} AND NON_UNIQUE = 0 "
                f"GROUP BY INDEX_NAME HAVING SUM(COLUMN_NAME IS NULL OR COLUMN_NAME NOT IN ({names})) = 0) AS tp_unique")

    def grant(self, connection: DatabaseConnection, schema: str, table: str, columns: list[str],
              refused: str) -> str:
        account = next(iter(re.findall(r"for user ('[^']*'@'[^']*')", refused)), None)  # as the server names it
        names = ", ".join(quote_ident(c, self.text) for c in columns)
        return (f"GRANT SELECT ({names}) ON {qualified(schema, table, dialect=self.text)} TO "
                f"{account or repr(connection.username) + '@<the host transfers connect from>'}")


class JdbcReader(SourceReader):
    counts_without_spark = True  # window_rows: one COUNT query of the database

    def __init__(self, source: PostgresSource | MysqlSource,
                 dialect: PostgresDialect | MysqlDialect) -> None:
        self.source = source
        self.dialect = dialect
        self.what = f"{dialect.label} source '{source.name}'"

    @property
    def multi_tenant(self) -> bool:
        return self.source.tenancy == "multi_tenant"

    def check(self, destination: str | None = None) -> None:
        self.dialect.ping(self.source.connection, self.what + for_destination(destination))

    def probe(self, models: list[ModelConfig], tenants: dict[str, list[str]], target: str) -> list[Check]:
        """Reach, log in, then each model's read exactly as a transfer sends it (columns, tenant
        and change predicates; in each tenant's schema for a schema-tenanted source), run as
        ``LIMIT 0`` in a read-only transaction that is rolled back."""
        from transfer_platform.probes import Probe, no_recipient

        probe = Probe(target)
        connection = self.source.connection
        reads = [(m, t) for m in models
                 for t in no_recipient(tenants.get(m.model_name), self.multi_tenant)[: 1 if self.multi_tenant else None]]
        names = [self._read_name(m, t) for m, t in reads]
        login = f"log in to database {connection.database!r} as {connection.username!r}"
        if not probe.reach(connection.host, connection.port):
            probe.skipped([login, *names], "the server cannot be reached")
            return probe.checks
        try:
            self.dialect.login(connection, self.what)
        except (ConnectionFailure, ConfigError) as exc:
            probe.failed(login, getattr(exc, "reason", None) or str(exc).splitlines()[-1].strip(),
                         "check username, database and the password's environment variable")
            probe.skipped(names, "cannot log in")
            return probe.checks
        probe.passed(login)
        for (model, tenant), name in zip(reads, names, strict=True):
            self._probe_read(probe, model, tenant, name)
        return probe.checks

    def _read_name(self, model: ModelConfig, tenant: str) -> str:
        columns = ", ".join(required_columns(model, multi_tenant=self.multi_tenant))
        what = "its source_query" if model.source_query else repr(model.source_table)
        where = "" if self.multi_tenant else f" in tenant {tenant!r}'s schema"
        return f"read model '{model.model_name}' ({what}{where}: {columns})"

    def _probe_read(self, probe: Probe, model: ModelConfig, tenant: str, name: str) -> None:
        request = ReadRequest(model, tenant, ReadBounds(EPOCH, EPOCH, Window(EPOCH, EPOCH + timedelta(seconds=1))))
        try:
            sql = (f"SELECT * FROM {derived_table(self.query_for(request), 'tp_probe', self.dialect.text)} "
                   "LIMIT 0")
            refused = self.dialect.try_query(self.source.connection, self.what, sql,
                                             self.default_schema_for(request))
        except ConfigError as exc:  # a tenant id that cannot name a schema
            probe.failed(name, exc.problems[0].message, exc.problems[0].fix)
            return
        if refused is None:
            probe.passed(name)
            return
        if not refused.startswith("refused: "):
            probe.failed(name, refused, self._read_fix())
            return
        probe.failed(name, refused.removeprefix("refused: "), self._grant_fix(model, tenant, refused))

    def _grant_fix(self, model: ModelConfig, tenant: str, refused: str) -> str:
        """The grant that lets the source's user read ``model`` (for ``tenant``), refused as
        ``refused`` says."""
        if model.source_query:
            return (f"grant {self.source.connection.username!r} SELECT on every table the source_query "
                    "reads (and USAGE on their schemas)")
        schema, _, table = model.source_table.rpartition(".")
        schema = tenant if not self.multi_tenant else schema or self.dialect.table_schema(self.source.connection)
        return self.dialect.grant(self.source.connection, schema, table,
                                  required_columns(model, multi_tenant=self.multi_tenant), refused)

    # -- SQL text -----------------------------------------------------------------------------

    def relation_for(self, request: ReadRequest) -> str:
        model, dialect = request.model, self.dialect.text
        if model.source_query:
            return wrap_source_query(model.source_query, dialect=dialect)
        if self.multi_tenant:
            return qualified(*model.source_table.split("."), dialect=dialect)
        return qualified(self._tenant_schema(request), model.source_table, dialect=dialect)

    def query_for(self, request: ReadRequest) -> str:
        model, dialect = request.model, self.dialect.text
        bounds = request.bounds
        kind = model.change_column  # bounds in the column's own type: its index is used
        predicates = [change_predicate(model.last_modified.name_in_source, kind.bound(bounds.lower),
                                       kind.bound(bounds.upper), dialect=dialect)]
        if self.multi_tenant:
            predicates.insert(0, tenant_predicate(model.organization_column, request.tenant_id, dialect))
        columns = required_columns(model, multi_tenant=self.multi_tenant)
        return source_select(self.relation_for(request), columns, predicates, dialect=dialect)

    def read_tenants(self, spark: SparkSession, model: ModelConfig, tenants: list[str], lower: datetime,
                     upper: datetime, destination: str) -> DataFrame:
        """The rows of ``model`` of every tenant in ``tenants`` with ``lower <= last_modified <
        upper`` (and NULL last-modified values), as the source names and types them (no model
        cast), with the organization column: one query (``org IN (<literals>)``), for source
        staging. Only a multi-tenant PostgreSQL source (validate refuses staging elsewhere)."""
        dialect = self.dialect.text
        kind = model.change_column
        request = ReadRequest(model, tenants[0], ReadBounds(lower, upper, Window(lower, upper)), destination)
        org = quote_ident(model.organization_column, dialect)
        predicates = [f"{org} IN ({', '.join(quote_literal(t, dialect) for t in tenants)})",
                      change_predicate(model.last_modified.name_in_source, kind.bound(lower), kind.bound(upper),
                                       dialect=dialect)]
        columns = required_columns(model, multi_tenant=True)
        sql = source_select(self.relation_for(request), columns, predicates, dialect=dialect)
        count_statement(self.source.name, "rows")
        return self._load(spark, request, derived_table(sql, dialect=dialect), {})

    def keys_unique(self, request: ReadRequest) -> bool:
        """Whether ``source_table`` holds each value of the model's primary key once, as a unique
        index of the database says (asked of its catalog): choosing one version per key is then
        no work for Spark. ``False`` for a ``source_query`` (a join can return a key twice), a
        view, a table without such an index, or a catalog that does not answer."""
        sql = self.unique_key_query(request)
        if sql is None:
            return False
        count_statement(self.source.name, "catalog")
        try:
            rows = self.dialect.select_rows(self.source.connection, self.what, sql, self.default_schema_for(request))
        except Exception:  # noqa: BLE001 - any refusal: each window is then resolved as any other
            _LOG.debug("asking %s for a unique index on %s failed", self.what, request.model.source_table,
                       exc_info=True)
            return False
        return bool(rows and rows[0][0])

    def unique_key_query(self, request: ReadRequest) -> str | None:
        """The catalog query of :meth:`keys_unique` (one row, one boolean); ``None`` for a
        ``source_query``."""
        model = request.model
        if model.source_query:
            return None
        if self.multi_tenant:
            schema, _, table = model.source_table.rpartition(".")
        else:
            schema, table = self._tenant_schema(request), model.source_table
        keys = [c.name_in_source for c in model.primary_key]
        return self.dialect.unique_key_sql(self.relation_for(request), schema or None, table, keys)

    def default_schema_for(self, request: ReadRequest) -> str | None:
        """The schema unqualified names resolve in: the tenant's, for a schema-tenanted query;
        else a multi-tenant PostgreSQL source's ``connection.schema`` (``validate`` refuses that
        setting on MySQL and on schema-tenanted sources, where it would have no effect)."""
        if self.multi_tenant:
            return self.dialect.search_schema(self.source.connection)
        if not request.model.source_query:
            return None
        return self._tenant_schema(request)

    def _tenant_schema(self, request: ReadRequest) -> str:
        problem = self.source.vendor_record.tenant_id_problem(
            request.tenant_id, uses_source_query=request.model.source_query is not None)
        if problem:
            container = self.source.vendor_record.tenant_container
            raise ConfigError([Problem(
                f"models.{request.model.model_name} (destination '{request.destination}')",
                f"tenant id {request.tenant_id!r} cannot name its {container} in schema-tenanted "
                f"{self.what}: {problem}",
                f"give the recipient an id_in_provider_system that can name its {container}")])
        return request.tenant_id

    # -- Spark --------------------------------------------------------------------------------

    def connection_options(self, request: ReadRequest) -> dict[str, str]:
        """Where and how to connect: URL, driver, credentials, session set-up."""
        connection = self.source.connection
        return {
            # the default schema in the URL: Spark Connect lower-cases option names
            "url": self.dialect.url(connection, self.default_schema_for(request)),
            "driver": self.dialect.driver,
            "sessionInitStatement": self.dialect.session_init,
            "fetchsize": str(FETCH_SIZE),
            # our predicates are in the query; filters Spark adds (the exact tenant match) stay in Spark
            "pushDownPredicate": "false",
            **jdbc_properties(connection, f"sources.{self.source.name}.connection.password"),
        }

    def partition_options(self, request: ReadRequest) -> dict[str, str]:
        parallel = self.source.max_concurrent_queries_per_transfer
        if parallel <= 1:
            return {}
        bounds, kind = request.bounds, request.model.change_column
        # Spark splits on a numeric, date or timestamp column (validate refuses text with > 1)
        lower, upper = kind.bound(bounds.lower), kind.bound(bounds.upper)
        if kind.kind == "timestamp":
            lower, upper = (b.strftime(_TIMESTAMP_BOUND_FORMAT) for b in (lower, upper))
        return {
            "partitionColumn": request.model.last_modified.name_in_source,
            "lowerBound": str(lower),
            "upperBound": str(upper),
            "numPartitions": str(parallel),
        }

    def check_read(self, spark: SparkSession, request: ReadRequest) -> None:
        """The read's query as a transfer sends it, its columns and types asked by Spark's JDBC
        reader (``SELECT * FROM (<query>) WHERE 1=0``: no row), then the model's casts analyzed."""
        dbtable = derived_table(self.query_for(request), dialect=self.dialect.text)
        count_statement(self.source.name, "schema")
        model_columns(self._load(spark, request, dbtable, {}), request, self.source.name, analyze=True)

    def read(self, spark: SparkSession, request: ReadRequest, *, with_origin: bool = False) -> DataFrame:
        """``with_origin`` adds nothing: a database's rows come from no file (a conflict between
        two versions of a row is named by their values)."""
        dbtable = derived_table(self.query_for(request), dialect=self.dialect.text)
        count_statement(self.source.name, "rows")
        frame = self._load(spark, request, dbtable, self.partition_options(request))
        return model_columns(frame, request, self.source.name)

    def _load(self, spark: SparkSession, request: ReadRequest, dbtable: str, partitions: dict[str, str], *,
              proven: bool = False) -> DataFrame:
        """The JDBC relation of ``dbtable`` (a failure to read it named and explained), its
        last-modified column's kind checked and, where needed, the tenant matched exactly.
        ``proven``: the same columns of the same relation were proven by :meth:`check_read` in
        this transfer, so the relation is not analyzed again here (a round trip to the server
        and its JDBC schema query, about 30 ms; the server analyzes it with the read anyway)."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        base = self.connection_options(request)
        skip = proven and not (self.multi_tenant and self.dialect.exact_tenant_match_in_spark)
        try:  # a local Spark resolves the relation as it loads it; a Connect client when analyzed
            frame = spark.read.format("jdbc").options(**base, **partitions).option("dbtable", dbtable).load()
            if skip:
                return frame
            frame = analyzed(frame)
        except (Py4JJavaError, PySparkException) as exc:
            raise self._read_failure(spark, request, base, exc) from None
        check_last_modified_type(frame, request, self.source.name)
        return self._exact_tenant(frame, request)

    def window_rows(self, spark: SparkSession, requests: list[ReadRequest], up_to: int) -> list[int] | None:
        """How many rows each of ``requests`` (windows of one model and tenant) would read, up to
        ``up_to``, asked of the database directly, without Spark: ``SELECT 0, COUNT(*) FROM
        (SELECT 1 FROM (<read 0>) LIMIT <up_to>) UNION ALL ...``, each count the window's own read
        (tenant, bounds, NULL last-modified values) stopping after ``up_to`` rows on the index the
        read uses. A row that Spark's exact tenant match would drop still counts: never fewer than
        the read returns. ``None`` when the database does not answer; each window is then read
        (and reports the failure itself)."""
        if not requests:
            return []
        count_statement(self.source.name, "rows")
        try:
            found = self.dialect.select_rows(self.source.connection, self.what, self.window_rows_sql(requests, up_to),
                                             self.default_schema_for(requests[0]))
        except Exception:  # noqa: BLE001 - any refusal: the windows' reads report it properly
            _LOG.debug("counting the rows of %s's windows failed; every window is read", self.what,
                       exc_info=True)
            return None
        return window_counts(found, len(requests), up_to)

    def window_rows_sql(self, requests: list[ReadRequest], up_to: int) -> str:
        """The query of :meth:`window_rows`: ``(window, rows)`` of each read, counted up to ``up_to``."""
        dialect = self.dialect
        one, rows = quote_ident("tp_one", dialect.text), quote_ident("tp_rows", dialect.text)
        return " UNION ALL ".join(
            f"SELECT {i} AS tp_window, COUNT(*) AS {rows} FROM (SELECT 1 AS {one} FROM "
            f"{derived_table(self.query_for(r), alias=f'tp_read{i}', dialect=dialect.text)} "
            f"LIMIT {int(up_to)}) AS tp_counted{i}"
            for i, r in enumerate(requests))

    def together_sql(self, requests: list[ReadRequest]) -> str:
        """The derived table of :meth:`read_together`: each window's own query, tagged with its
        window in ``WINDOW_COLUMN``, in one ``UNION ALL`` (also the driver's direct read)."""
        dialect = self.dialect.text
        tag = quote_ident(WINDOW_COLUMN, dialect)
        union = " UNION ALL ".join(
            f"SELECT {quote_ident(f'tp_read{i}', dialect)}.*, {i} AS {tag} FROM "
            f"{derived_table(self.query_for(r), alias=f'tp_read{i}', dialect=dialect)}"
            for i, r in enumerate(requests))
        return derived_table(union, dialect=dialect)

    def read_together(self, spark: SparkSession, requests: list[ReadRequest]) -> DataFrame:
        """Each window's own query, tagged with its window, in one ``UNION ALL`` that the
        database runs: one query, and one JDBC relation for Spark (a union of a relation per
        window cost Spark's planner about 6 JVM CPU-seconds for 64 windows, whatever the rows)."""
        count_statement(self.source.name, "rows")
        # proven: check_read ran on this relation's columns before the writer prepared; a failure
        # of this read surfaces when it runs, and the windows are then read alone (named errors)
        frame = self._load(spark, requests[0], self.together_sql(requests), {}, proven=True)
        return model_columns(frame, requests[0], self.source.name, keep=(WINDOW_COLUMN,))

    def count(self, spark: SparkSession, request: ReadRequest) -> int:
        """``SELECT COUNT(*) FROM (<query_for(request)>)``, run by the database through Spark's
        JDBC reader with the read's connection options: the rows :meth:`read` would return.

        Where Spark re-checks the tenant exactly (MySQL's case-insensitive collations), the
        database counts per exact tenant value instead (``GROUP BY CAST(org AS BINARY)``: a
        handful of groups, the query's own predicate still uses the index) and the same Spark
        check keeps the groups :meth:`read` would keep."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException
        from pyspark.sql import functions as F

        dialect = self.dialect.text
        counted = derived_table(self.query_for(request), alias="tp_counted", dialect=dialect)
        rows = quote_ident(COUNT_COLUMN, dialect)
        if self.multi_tenant and self.dialect.exact_tenant_match_in_spark:
            org = quote_ident(request.model.organization_column, dialect)
            sql = (f"SELECT MIN({org}) AS {org}, COUNT(*) AS {rows} FROM {counted} "
                   f"GROUP BY CAST({org} AS BINARY)")
        else:
            sql = f"SELECT COUNT(*) AS {rows} FROM {counted}"
        base = self.connection_options(request)
        count_statement(self.source.name, "rows")
        try:
            frame = (spark.read.format("jdbc").options(**base)
                     .option("dbtable", derived_table(sql, alias="tp_count", dialect=dialect)).load())
            total = self._exact_tenant(frame, request).agg(F.sum(COUNT_COLUMN)).first()[0]
        except (Py4JJavaError, PySparkException) as exc:
            raise self._read_failure(spark, request, base, exc) from None
        return int(total or 0)

    def _exact_tenant(self, frame: DataFrame, request: ReadRequest) -> DataFrame:
        from pyspark.sql.types import StringType

        org = request.model.organization_column
        if not (self.multi_tenant and self.dialect.exact_tenant_match_in_spark):
            return frame
        if not isinstance(frame.schema[org].dataType, StringType):
            return frame  # numbers, binary: the database's comparison is exact already
        from pyspark.sql import functions as F

        return frame.where(spark_col(org) == F.lit(request.tenant_id))

    def _read_failure(self, spark: SparkSession, request: ReadRequest, base: dict[str, str],
                      exc: BaseException) -> TransferPlatformError:
        """Why the read failed: the Spark Connect server gone (then the relation is not asked
        about: that would wait for the server again), missing columns if the relation lacks some,
        a last-modified column of another kind than the model says (its bounds then do not
        compare), both ``ConfigError``, else the driver's reason."""
        lost = server_lost(spark, exc)
        if lost is not None:
            return lost
        stall = self.stall_of(exc)
        if stall is not None:  # asking the source why would wait as long again
            return stall
        relation = self._relation_schema(spark, request, base)
        if relation is not None:
            available = relation.columns
            required = required_columns(request.model, multi_tenant=self.multi_tenant)
            missing = missing_columns(required, available,
                                      case_sensitive=self.dialect.case_sensitive_columns)
            if missing:
                return columns_mismatch(request, self.source.name, missing, available)
            try:
                check_last_modified_type(relation, request, self.source.name)
            except ConfigError as mismatch:
                return mismatch
        refused = self._refused(request)
        if refused is not None:
            return refused
        return DataError(
            f"reading {self.what} failed: {spark_error_reason(exc)}",
            model=request.model.model_name, destination=request.destination,
            fix=self._read_fix(),
        )

    def stalled(self) -> ConnectionFailure:
        """The error of a read of this source that waited past its ``read_timeout_seconds``."""
        return stalled(self.what, self.source.connection, self.source.read_timeout_seconds)

    def stall_of(self, exc: BaseException) -> ConnectionFailure | None:
        """:meth:`stalled` if ``exc``, a failed read, is the read timeout, or the source, asked
        (:meth:`stalls`), no longer answers; else ``None``."""
        return self.stalled() if is_stall(exc) or self.stalls() else None

    def stalls(self) -> bool:
        """Whether the source has stopped answering: asked after a read failed for a reason its
        driver may hide (MariaDB Connector/J 2.7 reports a read its ``socketTimeout`` ended as a
        NullPointerException, and a connection's set-up that the server never answers as
        "Couldn't connect"). A stall is a server that takes the connection (TCP) and then does
        not answer ``SELECT 1`` within the read timeout (or the connection's set-up within its
        own); a server that cannot be reached at all is not one (the read's error names it)."""
        connection = self.source.connection
        try:
            socket.create_connection((connection.host, connection.port), timeout=CONNECT_TIMEOUT_SECONDS).close()
        except OSError:
            return False
        try:
            self.dialect.ping(connection, self.what)
        except Exception as exc:  # noqa: BLE001 - a refusal is not a stall: the caller names it
            return is_stall(exc) or any(words in str(exc) for words in ("timed out", "timeout expired"))
        return False

    def _refused(self, request: ReadRequest) -> DataError | None:
        """The read refused for a missing right, as the database says it to its own driver (the
        read's query, returning no row, in a read-only transaction), with the grant that fixes
        it; ``None`` if the user cannot log in at all or the query is not refused for a right.
        Spark's JDBC error does not always carry the server's reason (MySQL's "Access denied
        for user ... to database ..." reaches it as "Couldn't connect to the database")."""
        connection = self.source.connection
        sql = f"SELECT * FROM {derived_table(self.query_for(request), 'tp_check', self.dialect.text)} LIMIT 0"
        try:
            self.dialect.login(connection, self.what)  # a wrong password is not a missing grant
            refused = self.dialect.try_query(connection, self.what, sql, self.default_schema_for(request))
        except Exception:  # noqa: BLE001 - any other failure: the caller names Spark's reason
            _LOG.debug("asking %s why the read failed failed", self.what, exc_info=True)
            return None
        if refused is None or not refused.startswith("refused: "):
            return None
        fix = self._grant_fix(request.model, request.tenant_id, refused)
        if self.dialect.refuses_missing_tables and not request.model.source_query:
            fix += (f"; {self.dialect.label} refuses a table that does not exist the same way: check that "
                    "source_table names an existing table")
        return DataError(
            f"{self.what} refused the read as {connection.username!r}: {refused.removeprefix('refused: ')}",
            model=request.model.model_name, destination=request.destination, fix=fix,
        )

    def _relation_schema(self, spark: SparkSession, request: ReadRequest,
                         base: dict[str, str]) -> DataFrame | None:
        """The relation with no predicate (Spark runs ``SELECT * FROM relation WHERE 1=0`` for its
        columns and types), or ``None`` if the relation itself cannot be read."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        relation = self.relation_for(request)
        if not request.model.source_query:
            relation = derived_table(f"SELECT * FROM {relation}", dialect=self.dialect.text)
        try:
            return analyzed(spark.read.format("jdbc").options(**base).option("dbtable", relation).load())
        except (Py4JJavaError, PySparkException):
            return None

    def _read_fix(self) -> str:
        if self.multi_tenant:
            return ("check that source_table exists (or source_query runs) and returns every "
                    "column named in the model's columns (name_in_source) and the organization column")
        return ("each recipient's rows live in the schema (MySQL: database) named by its "
                "id_in_provider_system: check that it exists and holds source_table (or that "
                "source_query runs there)")


class PostgresReader(JdbcReader):
    routes = frozenset({Route.SPARK, Route.DRIVER, Route.COPY_RELAY})

    def __init__(self, source: PostgresSource) -> None:
        super().__init__(source, PostgresDialect(source.read_timeout_seconds))

    def driver_reads(self, request: ReadRequest) -> DirectReads | None:
        """psycopg's reads of the model's small windows (:mod:`~transfer_platform.sources.direct`),
        which also stream and relay a window in binary COPY format."""
        from transfer_platform.sources.direct import DirectReads

        return DirectReads.proven(self, request)


class MysqlReader(JdbcReader):
    def __init__(self, source: MysqlSource) -> None:
        super().__init__(source, MysqlDialect(source.read_timeout_seconds))
