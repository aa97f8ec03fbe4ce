"""A BigQuery emulator for the tests: crucible-emulator (DuckDB underneath; in its own venv,
``scripts/crucible/.venv``, made by ``scripts/dev setup``) started as its own process on
127.0.0.1, stopped afterwards. The client (google-cloud-bigquery) talks to it over its REST API
with anonymous credentials; nothing is patched."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from transfer_platform_tests.support.processes import listening

CRUCIBLE = Path(__file__).resolve().parents[2] / "scripts" / "crucible" / ".venv" / "bin" / "crucible"
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
    command = [str(CRUCIBLE), "serve", "--dialect", "bigquery", "--host", "127.0.0.1", "--port", "{port}"]
    with listening("crucible (BigQuery emulator)", command, folder / "crucible.log") as port:
        yield BigqueryServer(f"http://127.0.0.1:{port}", folder / "crucible.log")
