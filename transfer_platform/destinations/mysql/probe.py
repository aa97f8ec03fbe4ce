"""``test-connection`` of a MySQL destination: reach, log in, then everything a transfer does in
its database, tried on probe tables that are dropped at once; a refused step names its grant."""

from __future__ import annotations

import uuid
from contextlib import suppress
from typing import TYPE_CHECKING

from transfer_platform.destinations.mysql import dialect as sql
from transfer_platform.destinations.mysql.errors import DENIED, first_line, grant_statement
from transfer_platform.errors import ConfigError, ConnectionFailure

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.mysql.writer import MysqlWriter
    from transfer_platform.probes import Check

_DIALECT = sql.MysqlDialect()


def probe_steps(database: str, name: str) -> list[tuple[str, tuple[str, ...], list[str]]]:
    """(check, the privileges it needs, statements), in the order they depend on each other."""
    table, staging, renamed = (sql.qualified(database, n) for n in (name, name + "_s", name + "_r"))
    return [
        ("create tables (model, status and staging tables)", ("CREATE",),
         [f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v LONGTEXT) {sql.TABLE_OPTIONS}",
          f"CREATE TABLE {staging} (id BIGINT NULL, v LONGTEXT NULL) {sql.TABLE_OPTIONS}"]),
        ("insert, read, update and delete rows (merge, state)", ("INSERT", "SELECT", "UPDATE", "DELETE"),
         [f"INSERT INTO {staging} VALUES (1, 'a')",
          f"INSERT INTO {table} SELECT * FROM {staging}",
          f"UPDATE {table} SET v = 'b'",
          f"DELETE t FROM {table} AS t JOIN {staging} AS s ON t.id = s.id"]),
        ("add and drop columns (schema evolution)", ("ALTER",),
         [f"ALTER TABLE {table} ADD COLUMN w LONGTEXT NULL", f"ALTER TABLE {table} DROP COLUMN w"]),
        ("rename tables (a full refresh's publish)", ("ALTER", "DROP", "CREATE", "INSERT"),
         _DIALECT.rename_tables(database, [(table, name + "_r")])),
        ("drop tables (staging, full refresh)", ("DROP",),
         [_DIALECT.drop_table(renamed, if_exists=False), _DIALECT.drop_table(staging, if_exists=False)]),
    ]


def probe_destination(self: MysqlWriter, models: list[ModelConfig], target: str) -> list[Check]:
    import pymysql

    from transfer_platform.destinations.mysql.writer import connect
    from transfer_platform.probes import Probe

    probe = Probe(target)
    connection = self.destination.connection
    name = "_tp_probe_" + uuid.uuid4().hex[:12]
    steps = probe_steps(self.database, name)
    load = "load rows with LOAD DATA LOCAL INFILE (staging)"
    later = [step for step, _, _ in steps] + [load]
    login = f"log in to database {connection.database!r} as {connection.username!r}"
    if not probe.reach(connection.host, connection.port):
        probe.skipped([login, *later], "the server cannot be reached")
        return probe.checks
    try:
        conn = connect(self.destination, self.what)
    except (ConnectionFailure, ConfigError) as exc:
        probe.failed(login, getattr(exc, "reason", None) or str(exc).splitlines()[-1].strip(),
                     "check username, database (it must exist) and the password's environment variable")
        probe.skipped(later, "cannot log in")
        return probe.checks
    probe.passed(login)
    try:
        with conn.cursor() as cursor:
            for index, (step, privileges, statements) in enumerate(steps):
                try:
                    for statement in statements:
                        cursor.execute(statement)
                except pymysql.err.MySQLError as exc:
                    denied = bool(exc.args) and exc.args[0] in DENIED
                    probe.failed(step, first_line(exc),
                                 grant_statement(connection, privileges) if denied else
                                 "check the server's log; the loader's grants are in the docs")
                    probe.skipped([s for s, _, _ in steps[index + 1:]] + [load], "the step before failed")
                    return probe.checks
                probe.passed(step)
            _probe_load(self, conn, probe, load, name)
    finally:
        with conn.cursor() as cursor:
            for suffix in ("", "_s", "_r", "_l"):
                with suppress(pymysql.err.MySQLError):  # reported by the step that failed
                    cursor.execute(_DIALECT.drop_table(sql.qualified(self.database, name + suffix)))
        conn.close()
    return probe.checks

def _probe_load(self: MysqlWriter, conn, probe, step: str, name: str) -> None:
    import pyarrow as pa
    import pymysql

    from transfer_platform.destinations.mysql.load import load_batches

    table = sql.qualified(self.database, name + "_l")
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE TABLE {table} (id BIGINT NULL) {sql.TABLE_OPTIONS}")
        load_batches(conn, sql.load_data(table, "{path}", ["id"]),
                     pa.table({"id": pa.array([1], pa.int64())}).to_batches())
    except pymysql.err.MySQLError as exc:
        probe.failed(step, first_line(exc),
                     "enable it on the server (SET GLOBAL local_infile = 1, or local_infile=ON in "
                     "its configuration); the loader needs no FILE privilege for it")
        return
    probe.passed(step)
