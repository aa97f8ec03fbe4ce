"""A real Azure Blob Storage emulator for the tests: Azurite's Blob service (npm, installed by
``scripts/dev setup`` under ``scripts/azurite``) started as its own process on 127.0.0.1, stopped
afterwards. Nothing patches the Azure SDK: requests go over HTTP to this process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.spark_server import free_port

AZURITE = Path(__file__).resolve().parents[2] / "scripts" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
#: Azurite's well-known development account and key (public: documented by Microsoft)
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass(frozen=True)
class Azurite:
    endpoint: str  # the Blob service's URL with the account: http://127.0.0.1:<port>/devstoreaccount1
    log: Path
    account: str = ACCOUNT
    key: str = ACCOUNT_KEY

    def service(self, key: str | None = None):
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(self.endpoint, credential={"account_name": self.account,
                                                            "account_key": key or self.key})

    def create_container(self, name: str) -> None:
        self.service().create_container(name)

    def container(self, name: str):
        return self.service().get_container_client(name)


@contextmanager
def azurite(folder: Path) -> Iterator[Azurite]:
    port = free_port()
    log = folder / "azurite.log"
    process = subprocess.Popen([str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                                "--location", str(folder / "data"), "--skipApiVersionCheck", "--loose",
                                "--disableTelemetry"],
                               stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120  # bounds a failure: it starts in about a second
        while True:
            if process.poll() is not None:
                raise AssertionError(f"azurite-blob exited: {log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"azurite did not listen in 120 s: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield Azurite(f"http://127.0.0.1:{port}/{ACCOUNT}", log)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
