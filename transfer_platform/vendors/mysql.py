"""MySQL and MariaDB: the source (read over JDBC) and the destination, their configuration,
their records and the SQL text both sides write."""

from __future__ import annotations

from datetime import date
from types import MappingProxyType
from typing import Literal

from pydantic import model_validator

from transfer_platform.config.connection_settings import DatabaseConnection
from transfer_platform.config.entries import (
    DatabaseSourceBase,
    DestinationBase,
    Place,
    refusal,
    server_host,
)
from transfer_platform.core.sql import SqlText
from transfer_platform.vendors.record import Refusal, Vendor

#: MySQL refuses database names over 64 characters
MYSQL_MAX_IDENTIFIER_CHARS = 64


class MysqlText(SqlText):
    """Names and literals as MySQL and MariaDB read them, in the reader's queries and the
    writer's statements alike: backquoted identifiers; a string as its UTF-8 bytes in a hex
    literal with a character set introducer (``_utf8mb4 X'...'``), which no ``sql_mode`` (such as
    NO_BACKSLASH_ESCAPES) can reinterpret and which is coercible, so the column's collation (and
    index) is used for the comparison; typed ``TIMESTAMP''`` and ``DATE''`` literals."""

    identifier_quote = "`"

    def string_literal(self, value: str) -> str:
        return f"_utf8mb4 X'{value.encode().hex().upper()}'"

    def timestamp_literal(self, text: str) -> str:
        return f"TIMESTAMP'{text}'"

    def date_literal(self, day: date) -> str:
        return f"DATE'{day.isoformat()}'"


SQL_TEXT = MysqlText()


# -- the source ------------------------------------------------------------------------------


class MysqlSource(DatabaseSourceBase):
    vendor: Literal["mysql"]
    connection: DatabaseConnection


def _database_name(tenant_id: str, uses_source_query: bool) -> str | None:
    if len(tenant_id) > MYSQL_MAX_IDENTIFIER_CHARS:
        return f"MySQL database names are at most {MYSQL_MAX_IDENTIFIER_CHARS} characters"
    if tenant_id != tenant_id.rstrip(" "):
        return "MySQL database names cannot end with a space"
    if uses_source_query and ("/" in tenant_id or "?" in tenant_id):
        return ("a source_query runs with the tenant's database as the JDBC URL's database, "
                "where '/' and '?' are syntax (the driver does not decode them); source_table "
                "has no such limit")
    return None


SOURCE = Vendor("mysql", "source", "transfer_platform.sources.jdbc", "MysqlReader", MysqlSource,
                drivers=("pymysql",), jdbc_jars=("/usr/share/java/mariadb-java-client.jar",),
                refuses=(Refusal("connection.schema", None,
                                 "MySQL's schemas are its databases, and the source reads connection.database "
                                 "(or the database a qualified source_table names)",
                                 "remove schema and put the database in connection.database"),),
                default_lookback_seconds=5, tenant_container="database", tenant_id_rule=_database_name)


# -- the destination -------------------------------------------------------------------------


class MysqlDestination(DestinationBase):
    """A MySQL or MariaDB database: the recipient's (``connection.database``, created beforehand),
    one table per model beside ``_transfer_status``."""

    vendor: Literal["mysql"]
    connection: DatabaseConnection

    @model_validator(mode="after")
    def _name_kept_whole(self) -> MysqlDestination:
        """MySQL refuses a database name over 64 characters at the first statement; refused here,
        where the destination is entered."""
        size = len(self.connection.database)
        if size > MYSQL_MAX_IDENTIFIER_CHARS:
            raise refusal(f"connection.database is {size} characters long; MySQL database names are at most "
                          f"{MYSQL_MAX_IDENTIFIER_CHARS} characters",
                          f"use a database name of at most {MYSQL_MAX_IDENTIFIER_CHARS} characters")
        return self

    def place(self) -> Place:
        c = self.connection
        host = server_host(c.host)
        return Place("mysql", (host, c.port), (c.database,), f"MySQL {host}:{c.port}, database {c.database}")


#: timestamps as DATETIME(6) in UTC (the session's time_zone is '+00:00'); a string primary-key
#: column is VARCHAR(255) instead of LONGTEXT (an index needs a bounded length:
#: destinations/mysql/dialect.py)
COLUMN_TYPES = MappingProxyType({
    "string": "LONGTEXT",
    "integer": "BIGINT",
    "float": "DOUBLE",
    "boolean": "BOOLEAN",
    "timestamp": "DATETIME(6)",
    "date": "DATE",
    "decimal": "DECIMAL(38,9)",
    "json": "JSON",
})

DESTINATION = Vendor("mysql", "destination", "transfer_platform.destinations.mysql.writer", "MysqlWriter",
                     MysqlDestination, drivers=("pymysql", "pyarrow", "pyarrow.csv"), column_types=COLUMN_TYPES,
                     state_store="status row",
                     empty_table_load="create-and-rename", default_port=3306,
                     refuses=(Refusal("connection.schema", None,
                                      "MySQL's schemas are its databases: the destination writes connection.database",
                                      "remove schema and put the recipient's database in connection.database"),))
