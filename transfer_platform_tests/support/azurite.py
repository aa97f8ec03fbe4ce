"""A real Azure Blob Storage emulator for the tests: Azurite's Blob service (npm, installed by
``scripts/dev setup`` under ``scripts/azurite``) started as its own process on 127.0.0.1, stopped
afterwards. Nothing patches the Azure SDK: requests go over HTTP to this process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from transfer_platform_tests.support.processes import listening

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
    command = [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", "{port}", "--location", str(folder / "data"),
               "--skipApiVersionCheck", "--loose", "--disableTelemetry"]
    with listening("azurite-blob", command, folder / "azurite.log") as port:
        yield Azurite(f"http://127.0.0.1:{port}/{ACCOUNT}", folder / "azurite.log")
