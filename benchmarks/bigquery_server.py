"""A BigQuery emulator for the warehouses benchmark and the tests
(``transfer_platform_tests/support/bigquery_server.py``): crucible-emulator (DuckDB underneath; in its own venv,
``scripts/crucible/.venv``, made by ``scripts/dev setup``) started as its own process on
127.0.0.1, stopped afterwards. The client (google-cloud-bigquery) talks to it over its REST API
with anonymous credentials; nothing is patched."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.spark_server import free_port, listening, stop, wait_for

CRUCIBLE = Path(__file__).resolve().parents[1] / "scripts" / "crucible" / ".venv" / "bin" / "crucible"
PROJECT = "tp-test-project"


@dataclass(frozen=True)
class BigqueryServer:
    endpoint: str  # http://127.0.0.1:<port>
    log: Path
    project: str = PROJECT

    def client(self):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import bigquery

        return bigquery.Client(project=self.project, credentials=AnonymousCredentials(),
                               client_options={"api_endpoint": self.endpoint})

    def create_dataset(self, name: str) -> None:
        client = self.client()
        try:
            client.create_dataset(f"{self.project}.{name}")
        finally:
            client.close()


@contextmanager
def bigquery_server(folder: Path) -> Iterator[BigqueryServer]:
    """crucible on a free loopback port, yielded once it accepts connections."""
    port = free_port()
    log = folder / "crucible.log"
    with log.open("w") as out:
        process = subprocess.Popen([str(CRUCIBLE), "serve", "--dialect", "bigquery", "--host", "127.0.0.1",
                                    "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(process, log, "crucible (BigQuery emulator)", lambda: listening(port))
        yield BigqueryServer(f"http://127.0.0.1:{port}", log)
    finally:
        stop(process)
