"""The ClickHouse of the tests: chDB 4.4 (ClickHouse 26.9 embedded in the Python process) behind
clickhouse-connect's ``chdb://`` client. chDB opens one data folder per process and no second
process may open it meanwhile, so the session's folder is opened by this process only (the
writer's client and the tests' readers share its engine); a test that needs another process (the
kill -9 test) uses a folder of its own, opened by one process at a time. chDB has no network,
users or TLS: those paths of clickhouse-connect are not exercised here."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class ChdbFolder:
    """The session's chDB data folder; a database per test destination."""

    path: Path

    def client(self) -> Any:
        import clickhouse_connect

        return clickhouse_connect.get_client(dsn=f"chdb://{self.path}")

    def new_database(self) -> str:
        return f"tp_ch_{uuid.uuid4().hex[:10]}"


def chdb_folder(root: Path) -> ChdbFolder:
    """A folder for the session (the engine starts on the first client, in this process)."""
    path = root / "chdb"
    path.mkdir(parents=True, exist_ok=True)
    return ChdbFolder(path.resolve())
