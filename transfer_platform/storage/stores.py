"""Where object storage keeps its objects: a folder (:class:`FolderStore`), an S3 bucket
(:class:`BucketStore`), an Azure container (``azure.AzureBucketStore``), a GCS bucket
(``gcs.GcsBucketStore``) or a folder of an SFTP server (``sftp.SFTPStore``), chosen once by the
connection's type (:func:`store_for`). Each store
also holds the models' locks of its kind (a ``flock``'d file, or a lock object), so the writer
never asks which one it has."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Protocol

from transfer_platform.config.connection_settings import (
    AzureBlobConnection,
    GcsConnection,
    S3Connection,
    SFTPConnection,
)
from transfer_platform.errors import ConnectionFailure
from transfer_platform.probes import current_user
from transfer_platform.storage.locks import FileLock
from transfer_platform.storage.s3 import LockedBucket, S3Store, storage_options
from transfer_platform.vendors.object_storage import LocalStorageConnection


class Store(Protocol):
    """Objects by key ('/'-separated, relative to the bucket or folder), and the models' locks."""

    where: str  # "bucket B at endpoint E", "folder F": for messages
    bucket_name: str  # the bucket, or the folder: as manifests name it
    #: delta-rs's storage options, from which pyarrow's file system is built for the executors that write a large window's files
    #: (``None``: the local file system)
    options: dict[str, str] | None

    def put(self, key: str, data: bytes) -> str:
        """Write an object whole (a reader sees the old or the new one); returns its ETag."""

    def get(self, key: str) -> bytes | None: ...

    def keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix`` (a folder-like prefix ending in '/')."""

    def delete(self, keys: list[str]) -> None: ...

    def etag(self, key: str, md5: str) -> str:
        """The ETag of an object written by pyarrow (``md5``: its content's)."""

    def location(self, key: str) -> str:
        """``key`` as pyarrow's file system (of ``staging_filesystem``) names it."""

    def lock(self, books: str, model: str, transfer_id: str, *, destination: str, wait_seconds: float) -> None:
        """Hold ``model``'s lock (``books``: the key of the bookkeeping folder) until
        :meth:`release_all`; ``TransferRunning`` after ``wait_seconds``."""

    def renew(self, model: str, transfer_id: str) -> None:
        """Tell that the model's lock is still held (a window committed)."""

    def release_all(self) -> None: ...

    def holds_locks(self) -> bool: ...


def store_for(connection: LocalStorageConnection | S3Connection | AzureBlobConnection | GcsConnection
              | SFTPConnection,
              owner: str) -> Store:
    """The store of an object storage connection: a bucket's, a container's, or a folder's."""
    if isinstance(connection, S3Connection):
        return BucketStore(connection, owner)
    if isinstance(connection, AzureBlobConnection):
        from transfer_platform.storage.azure import AzureBucketStore

        return AzureBucketStore(connection, owner)
    if isinstance(connection, SFTPConnection):
        from transfer_platform.storage.sftp import SFTPStore

        return SFTPStore(connection, owner)
    if isinstance(connection, GcsConnection):
        from transfer_platform.storage.gcs import GcsBucketStore

        return GcsBucketStore(connection, owner)
    return FolderStore(connection.path)


class FolderStore(LockedBucket):
    """Objects as files under a folder; a file is written aside and renamed into place. A
    model's lock: the ``flock`` of ``<books>/_locks/<model>.lock`` (as Delta's), which lasts as
    long as its holder (nothing to renew)."""

    options = None

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.where = f"folder {self.root}"
        self.bucket_name = str(root)

    def put(self, key: str, data: bytes) -> str:
        path = self.root / key
        aside = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(aside, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(aside, path)
        except OSError as exc:
            aside.unlink(missing_ok=True)
            raise self._failure("write", key, exc) from None
        return hashlib.md5(data, usedforsecurity=False).hexdigest()  # a single-part S3 ETag

    def get(self, key: str) -> bytes | None:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._failure("read", key, exc) from None

    def etag(self, key: str, md5: str) -> str:
        """A file written whole: its MD5, as a single-part S3 upload's ETag."""
        return md5

    def location(self, key: str) -> str:
        """``key`` as pyarrow's local file system names it."""
        return str((self.root / key).resolve())

    def keys(self, prefix: str) -> list[str]:
        folder = self.root / prefix
        try:
            if not folder.is_dir():
                self.root.mkdir(parents=True, exist_ok=True)  # as a bucket, the folder exists
                return []
            return sorted(str(p.relative_to(self.root)) for p in folder.rglob("*")
                          if p.is_file() and not p.name.startswith("."))
        except OSError as exc:
            raise self._failure("list", prefix, exc) from None

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            try:
                (self.root / key).unlink(missing_ok=True)
            except OSError as exc:
                raise self._failure("delete", key, exc) from None

    def lock(self, books: str, model: str, transfer_id: str, *, destination: str, wait_seconds: float) -> None:
        self._locks.hold(model, FileLock(self.root / books / "_locks", model, transfer_id), destination=destination,
                         wait_seconds=wait_seconds)

    def _failure(self, what: str, key: str, exc: OSError) -> ConnectionFailure:
        return ConnectionFailure(f"object storage {self.where} ({what} {key})", reason=exc.strerror or str(exc),
                                 fix=f"let the user transfers run as ({current_user()}) create, write and "
                                     f"delete files in {self.root}, or point connection.path elsewhere")


class BucketStore(LockedBucket, S3Store):
    """Objects in an S3 bucket (:class:`S3Store`). A model's lock: the object
    ``<books>/<model>/lock.json`` (:class:`~transfer_platform.storage.s3.ObjectLock`)."""

    def __init__(self, connection: S3Connection, owner: str, *, at: str = "connection") -> None:
        super().__init__(connection, owner, at=at)
        self.bucket_name = connection.bucket
        self.options = storage_options(connection, owner, at=at)
