"""The ClickHouse test destination: a database of the session's chDB folder, and its reader,
which reads what a recipient reads through clickhouse-connect (``FINAL``), never through the
writer; helpers that read a chDB folder from another process (the kill -9 test)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from transfer_platform.config.models import ModelConfig
    from transfer_platform_tests.support.destinations import Place, TestDestination


def q(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def clickhouse_rows(client: Any, database: str, model: ModelConfig) -> list[dict] | None:
    """The model's rows as a recipient reads them (``SELECT ... FINAL``), or None if no table."""
    from transfer_platform_tests.support.destinations import _columns

    found = client.query("SELECT count() FROM system.tables WHERE database = {db:String} AND name = {t:String}",
                         parameters={"db": database, "t": model.model_name}).result_rows[0][0]
    if not found:
        return None
    present = {r[0] for r in client.query("SELECT name FROM system.columns WHERE database = {db:String} "
                                          "AND table = {t:String}",
                                          parameters={"db": database, "t": model.model_name}).result_rows}
    names = [c for c in _columns(model) if c in present]
    result = client.query(f"SELECT {', '.join(q(c) for c in names)} FROM {q(database)}.{q(model.model_name)} FINAL")
    return [dict(zip(names, row, strict=True)) for row in result.result_rows]


def clickhouse_reader(folder: Any, database: str) -> Callable[[ModelConfig], list[dict] | None]:
    from transfer_platform_tests.support.destinations import _clean

    def read(model: ModelConfig) -> list[dict] | None:
        rows = clickhouse_rows(folder.client(), database, model)
        return None if rows is None else _clean(rows, model)

    return read


def clickhouse(place: Place) -> TestDestination:
    from transfer_platform_tests.support.destinations import TestDestination

    folder = place.fixture("clickhouse_server")
    database = folder.new_database()
    return TestDestination("clickhouse", "clickhouse",
                           {"vendor": "clickhouse", "connection": {"path": str(folder.path), "database": database}},
                           clickhouse_reader(folder, database), {"database": database, "path": folder.path})


def chdb_in_another_process(path: Path, sql: str) -> list[tuple]:
    """``sql``'s rows, read by a fresh Python process that opens the chDB folder with
    clickhouse-connect (a recipient after the writer's process ended)."""
    code = textwrap.dedent("""
        import pickle, sys, clickhouse_connect
        client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1])
        sys.stdout.buffer.write(pickle.dumps(client.query(sys.argv[2]).result_rows))
    """)
    done = subprocess.run([sys.executable, "-c", code, str(path), sql], capture_output=True, check=True, timeout=180)
    return pickle.loads(done.stdout)
