"""``test-connection`` of a ClickHouse destination: reach the server, log in, find the database,
then everything a transfer does in it, tried on probe tables dropped at once; a refused step names
the GRANT ClickHouse says is missing. An embedded chDB folder has no users: its steps run, and no
grant is checked."""

from __future__ import annotations

import uuid
from contextlib import suppress
from typing import TYPE_CHECKING

from transfer_platform.destinations.clickhouse.dialect import ClickhouseDialect
from transfer_platform.destinations.clickhouse.session import ACCESS_DENIED, error_code, first_line, missing_privilege
from transfer_platform.errors import ConnectionFailure

if TYPE_CHECKING:
    from transfer_platform.destinations.clickhouse.writer import ClickhouseWriter
    from transfer_platform.probes import Check

_DIALECT = ClickhouseDialect()
_SUFFIXES = ("", "_c", "_s")  # the probe's model table, its clone, its staging table


def probe_steps(database: str, name: str) -> list[tuple[str, list[str]]]:
    """(check, statements), in the order they depend on each other."""
    table, clone, staging = (_DIALECT.qualified(database, name + suffix) for suffix in _SUFFIXES)
    return [
        ("create tables (model, staging, swap and lock tables)",
         [f"CREATE TABLE {table} (id Int64, lm Int64, v Nullable(String), _tp_deleted UInt8 DEFAULT 0) "
          "ENGINE = ReplacingMergeTree(lm, _tp_deleted) ORDER BY id",
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
         [_DIALECT.drop_table(t, if_exists=False) for t in (clone, staging, table)]),
    ]


def probe_destination(self: ClickhouseWriter, target: str) -> list[Check]:
    from clickhouse_connect.driver.exceptions import ClickHouseError

    from transfer_platform.probes import Probe

    probe, c = Probe(target), self.destination.connection
    name = "_tp_probe_" + uuid.uuid4().hex[:12]
    steps = probe_steps(self.container, name)
    later = [step for step, _ in steps]
    if c.path is not None:
        login = f"open chDB folder {c.path} (no users: no grant checked)"
    else:
        login = f"log in to database {c.database!r} as {c.username or 'default'!r}"
        if not probe.reach(c.host, c.server_port):
            probe.skipped([login, *later], "the server cannot be reached")
            return probe.checks
    failure = None
    try:
        session = self.session
        self._create_container()
        if not session.one(_DIALECT.database_exists(self.container))[0]:
            raise ConnectionFailure(self.what, reason=f"database {self.container!r} does not exist or is not visible",
                                    fix=f"create it (CREATE DATABASE {_DIALECT.quote(self.container)}) as an "
                                        "administrator and grant the loader its rights on it (docs/permissions.md)")
    except ConnectionFailure as exc:
        failure = (exc.reason or str(exc), exc.fix or "check the connection settings")
    except ClickHouseError as exc:
        failure = (first_line(exc), "check the connection settings")
    if failure is not None:
        probe.failed(login, *failure)
        probe.skipped(later, "cannot log in")
        return probe.checks
    probe.passed(login)
    try:
        for index, (step, statements) in enumerate(steps):
            try:
                for statement in statements:
                    session.execute(statement)
            except ClickHouseError as exc:
                probe.failed(step, first_line(exc), missing_privilege(self.destination, self.what, exc).grant
                             if error_code(exc) == ACCESS_DENIED else
                             "check the server's log; the loader's grants are in docs/permissions.md")
                probe.skipped([s for s, _ in steps[index + 1:]], "the step before failed")
                break
            probe.passed(step)
    finally:
        for suffix in _SUFFIXES:
            with suppress(Exception):
                session.execute(_DIALECT.drop_table(_DIALECT.qualified(self.container, name + suffix)))
    return probe.checks
