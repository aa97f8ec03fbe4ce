"""Delta Lake tables (written with delta-rs) in a folder, an S3 bucket or an Azure container:
the destination's configuration and its record."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag

from transfer_platform.config.connection_settings import (
    AzureBlobConnection,
    PathConnection,
    S3Connection,
    folder_or_bucket,
)
from transfer_platform.config.entries import DestinationBase, Place, StrictModel, folder_place
from transfer_platform.vendors.record import AZURE, Extra, Vendor, one_query


def _delta_connection(value: object) -> str:
    """Delta's connection: a ``container`` makes it an Azure one, else a folder or a bucket."""
    has_container = isinstance(value, AzureBlobConnection) or (isinstance(value, dict) and "container" in value)
    return "container" if has_container else folder_or_bucket(value)


DeltaConnection = Annotated[Annotated[PathConnection, Tag("folder")] | Annotated[S3Connection, Tag("bucket")]
                            | Annotated[AzureBlobConnection, Tag("container")], Discriminator(_delta_connection)]


class DeltaSharingSettings(StrictModel):
    """Whether the API serves the destination's tables to its recipient over the Delta Sharing
    protocol (``transfer_platform/sharing``, docs/sharing.md): a share named after the destination,
    one schema ``default``, a table per model."""

    enabled: bool = False
    #: how long a file's pre-signed URL in a query's answer works
    url_seconds: int = Field(900, ge=60, le=7 * 24 * 3600)


class DeltaDestination(DestinationBase):
    """Delta Lake tables under ``path`` (one table per model), written with delta-rs."""

    vendor: Literal["delta"]
    connection: DeltaConnection  # a bucket: the tables under s3://<bucket>/<prefix>/ (az://<container>/...)
    sharing: DeltaSharingSettings = Field(default_factory=DeltaSharingSettings)

    def extras(self) -> tuple[Extra, ...]:
        """In an Azure container: azure-storage-blob, which holds the models' locks and signs
        Delta Sharing's URLs (delta-rs reaches the container by itself)."""
        return (AZURE,) if isinstance(self.connection, AzureBlobConnection) else ()

    def place(self) -> Place:
        if isinstance(self.connection, S3Connection | AzureBlobConnection):
            return self.connection.place()
        return folder_place(self.connection.path, "folder")


DESTINATION = Vendor("delta", "destination", "transfer_platform.destinations.delta", "DeltaWriter", DeltaDestination,
                     drivers=("deltalake", "pyarrow"),
                     refuses=(one_query("destination", "delta-rs writes each window as one MERGE commit from the "
                                                       "driver, there are no queries to run in parallel"),))
