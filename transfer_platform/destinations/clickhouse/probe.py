"""``test-connection`` of a ClickHouse destination: reach the server, log in, find the database,
then everything a transfer does in it, tried on probe tables dropped at once; a refused step names
the GRANT ClickHouse says is missing. An embedded chDB folder has no users: its steps run, and no
grant is checked."""

from __future__ import annotations

import uuid
from contextlib import suppress
from typing import TYPE_CHECKING

from transfer_platform.destinations.clickhouse.dialect import ClickhouseDialect
from transfer_platform.destinations.clickhouse.session import (
    ACCESS_DENIED,
    ClickhouseSession,
    connect,
    error_code,
    first_line,
    missing_privilege,
)
from transfer_platform.errors import ConnectionFailure

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.clickhouse.writer import ClickhouseWriter
    from transfer_platform.probes import Check

_DIALECT = ClickhouseDialect()


def probe_steps(database: str, name: str) -> list[tuple[str, list[str]]]:
    """(check, statements), in the order they depend on each other."""
    q = _DIALECT.qualified
    table, clone, staging = q(database, name), q(database, name + "_c"), q(database, name + "_s")
    engine = "ENGINE = ReplacingMergeTree(lm, _tp_deleted) ORDER BY id"
    return [
        ("create tables (model, staging, swap and lock tables)",
         [f"CREATE TABLE {table} (id Int64, lm Int64, v Nullable(String), _tp_deleted UInt8 DEFAULT 0) {engine}",
          f"CREATE TABLE {staging} (id Nullable(Int64), lm Nullable(Int64), v Nullable(String)) ENGINE = MergeTree "
          "ORDER BY tuple()", f"CREATE TABLE {clone} AS {table} COMMENT '{{}}'"]),
        ("insert and read rows (staging, the window's swap)",
         [f"INSERT INTO {staging} VALUES (1, 1, 'a')",
          f"INSERT INTO {clone} (id, lm, v) SELECT assumeNotNull(id), assumeNotNull(lm), v FROM {staging}",
          f"SELECT count() FROM {clone} FINAL"]),
        ("attach parts, swap tables and set comments (a window's commit, its state)",
         [_DIALECT.attach_all(clone, table), _DIALECT.exchange(table, clone), _DIALECT.set_comment(table, "{}")]),
        ("add and drop columns (schema evolution)",
         [f"ALTER TABLE {table} ADD COLUMN w Nullable(Int64)", f"ALTER TABLE {table} DROP COLUMN w"]),
        ("drop tables (staging, swap, full refresh)",
         [_DIALECT.drop_table(clone, if_exists=False), _DIALECT.drop_table(staging, if_exists=False),
          _DIALECT.drop_table(table, if_exists=False)]),
    ]


def probe_destination(self: ClickhouseWriter, models: list[ModelConfig], target: str) -> list[Check]:
    from clickhouse_connect.driver.exceptions import ClickHouseError

    from transfer_platform.probes import Probe

    probe = Probe(target)
    connection = self.destination.connection
    name = "_tp_probe_" + uuid.uuid4().hex[:12]
    steps = probe_steps(self.container, name)
    later = [step for step, _ in steps]
    if connection.path is not None:
        login = f"open chDB folder {connection.path} (no users: no grant checked)"
    else:
        login = f"log in to database {connection.database!r} as {connection.username or 'default'!r}"
        if not probe.reach(connection.host, connection.server_port):
            probe.skipped([login, *later], "the server cannot be reached")
            return probe.checks
    try:
        client = connect(self.destination, self.what)
        session = ClickhouseSession(client)
        if connection.path is not None:
            session.execute(f"CREATE DATABASE IF NOT EXISTS {_DIALECT.quote(self.container)}")
        elif not session.one(("SELECT count() FROM system.databases WHERE name = {db:String}",
                              {"db": self.container}))[0]:
            raise ConnectionFailure(self.what, reason=f"database {self.container!r} does not exist or is not visible",
                                    fix=f"create it (CREATE DATABASE {_DIALECT.quote(self.container)}) as an "
                                        "administrator and grant the loader its rights on it (docs/permissions.md)")
    except ConnectionFailure as exc:
        probe.failed(login, exc.reason or str(exc), exc.fix or "check the connection settings")
        probe.skipped(later, "cannot log in")
        return probe.checks
    except ClickHouseError as exc:
        probe.failed(login, first_line(exc), "check the connection settings")
        probe.skipped(later, "cannot log in")
        return probe.checks
    probe.passed(login)
    try:
        for index, (step, statements) in enumerate(steps):
            try:
                for statement in statements:
                    session.execute(statement)
            except ClickHouseError as exc:
                fix = (missing_privilege(self.destination, self.what, exc).grant
                       if error_code(exc) == ACCESS_DENIED else
                       "check the server's log; the loader's grants are in docs/permissions.md")
                probe.failed(step, first_line(exc), fix)
                probe.skipped([s for s, _ in steps[index + 1:]], "the step before failed")
                return probe.checks
            probe.passed(step)
    finally:
        for table in (name, name + "_c", name + "_s"):
            with suppress(Exception):
                session.execute(_DIALECT.drop_table(_DIALECT.qualified(self.container, table)))
        if connection.path is None:
            with suppress(Exception):
                client.close()
    return probe.checks
