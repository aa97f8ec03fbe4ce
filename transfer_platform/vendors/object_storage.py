"""Object storage: Parquet files and signed manifests in a folder (``local``), an S3 bucket
(``s3``), an Azure Blob Storage container (``abs``), a Google Cloud Storage bucket (``gcs``) or a
folder on an SFTP server (``sftp``), all written by
``destinations/object_storage.py``: the destinations' configuration and their records."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field

from transfer_platform.config.connection_settings import (
    PREFIX_PATTERN,
    AzureBlobConnection,
    GcsConnection,
    S3Connection,
    SFTPConnection,
)
from transfer_platform.config.entries import DestinationBase, Place, StrictModel, folder_place
from transfer_platform.config.secrets import EnvRef
from transfer_platform.vendors.record import AZURE, GCS, SFTP, Vendor

_WRITER = ("transfer_platform.destinations.object_storage", "ObjectStorageWriter")
_DRIVERS = ("pyarrow", "pyarrow.parquet", "cryptography")


class ObjectStorageBase(DestinationBase):
    """Parquet files and signed manifests (``destinations/object_storage.py``)."""

    signing_key: EnvRef  # an Ed25519 private key: manifests are signed with it

    def problems(self, path: str) -> list:
        from transfer_platform.config.signing_keys import KEY_FORMAT, load_signing_key
        from transfer_platform.errors import Problem

        text = os.environ.get(self.signing_key.env)
        if text is None:  # as any secret's: validate warns, a transfer to this destination refuses
            return []
        try:
            load_signing_key(text)
        except ValueError as exc:
            return [Problem(f"{path}.signing_key", f"environment variable {self.signing_key.env} does not "
                            f"hold a signing key: {exc}", f"it must hold {KEY_FORMAT}")]
        return []


# -- a folder --------------------------------------------------------------------------------


class LocalStorageConnection(StrictModel):
    path: Path
    prefix: str = Field(default="", pattern=PREFIX_PATTERN)


class LocalStorageDestination(ObjectStorageBase):
    """Object storage in a folder (a mounted bucket, a test, the demo)."""

    vendor: Literal["local"]
    connection: LocalStorageConnection

    def place(self) -> Place:
        return folder_place(self.connection.path / self.connection.prefix.strip("/"), "folder")


LOCAL = Vendor("local", "destination", *_WRITER, LocalStorageDestination, drivers=_DRIVERS, only_adds_files=True,
               state_store="manifest")


# -- an S3 bucket ----------------------------------------------------------------------------


class S3Destination(ObjectStorageBase):
    """Object storage in an S3 (or S3-compatible) bucket."""

    vendor: Literal["s3"]
    connection: S3Connection

    def place(self) -> Place:
        return self.connection.place()


S3 = Vendor("s3", "destination", *_WRITER, S3Destination, drivers=(*_DRIVERS, "boto3"), only_adds_files=True,
            state_store="manifest")


# -- an Azure Blob Storage container ---------------------------------------------------------


class AzureBlobDestination(ObjectStorageBase):
    """Object storage in an Azure Blob Storage container."""

    vendor: Literal["abs"]
    connection: AzureBlobConnection

    def place(self) -> Place:
        return self.connection.place()


ABS = Vendor("abs", "destination", *_WRITER, AzureBlobDestination, drivers=(*_DRIVERS, "azure.storage.blob"),
             only_adds_files=True, state_store="manifest", extra=AZURE)


# -- a Google Cloud Storage bucket -----------------------------------------------------------


class GcsDestination(ObjectStorageBase):
    """Object storage in a Google Cloud Storage bucket."""

    vendor: Literal["gcs"]
    connection: GcsConnection

    def place(self) -> Place:
        return self.connection.place()


GCS = Vendor("gcs", "destination", *_WRITER, GcsDestination, drivers=(*_DRIVERS, "google.cloud.storage"),
             only_adds_files=True, state_store="manifest", extra=GCS)


# -- a folder on an SFTP server --------------------------------------------------------------


class SFTPDestination(ObjectStorageBase):
    """Object storage in a folder on an SFTP server (``storage/sftp.py``: paramiko)."""

    vendor: Literal["sftp"]
    connection: SFTPConnection

    def place(self) -> Place:
        return self.connection.place()


SFTP = Vendor("sftp", "destination", *_WRITER, SFTPDestination, drivers=(*_DRIVERS, "paramiko"), only_adds_files=True,
             state_store="manifest", extra=SFTP)
