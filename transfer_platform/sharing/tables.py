"""What a recipient's token sees, and a table's committed snapshot with its files' URLs.

A share is a ``delta`` destination of the recipient with ``sharing.enabled``, named after it; it has
one schema, ``default``, whose tables are the destination's models (``enabled_models``). A table is
read from its Delta log through delta-rs: a snapshot is a committed version, so a transfer writing
the table meanwhile (its window staged outside the table, its MERGE not yet committed) is never
seen half done. Each file of a snapshot is answered as a URL that works for
``sharing.url_seconds``: S3's pre-signed GET (boto3, Signature Version 4), an Azure SAS of read
permission, or for a folder a URL of the API itself signed with an HMAC of the platform's secret
key (checked by the file route: :func:`verify_file_url`)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from transfer_platform.config.connection_settings import AzureBlobConnection, S3Connection
from transfer_platform.config.secrets import SECRET_KEY_ENV
from transfer_platform.errors import ConfigError, Problem
from transfer_platform.vendors.delta import DeltaDestination

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from transfer_platform.config.models import ModelConfig, PlatformConfig

SCHEMA = "default"
_IDS = uuid.UUID("6f1c1a52-5d0e-4a44-9a53-3b1f2d7c8e90")  # the namespace of shares' and tables' ids


class SharingError(Exception):
    """An answer of the protocol other than success: ``{"errorCode": ..., "message": ...}``."""

    def __init__(self, status_code: int, code: str, message: str) -> None:
        self.status_code, self.code = status_code, code
        super().__init__(message)


def not_found(what: str) -> SharingError:
    """The same answer whether the thing does not exist or is another recipient's."""
    return SharingError(404, "RESOURCE_DOES_NOT_EXIST", f"{what} does not exist or is not shared with you")


def bad_parameter(message: str) -> SharingError:
    return SharingError(400, "INVALID_PARAMETER_VALUE", message)


def share_id(share: str) -> str:
    return str(uuid.uuid5(_IDS, share))


def table_id(share: str, table: str) -> str:
    return str(uuid.uuid5(_IDS, f"{share}.{SCHEMA}.{table}"))


def shares_of(config: PlatformConfig, recipient: str) -> dict[str, DeltaDestination]:
    """The recipient's shares by name, in the configuration's order."""
    return {d.name: d for d in config.destinations
            if isinstance(d, DeltaDestination) and d.sharing.enabled and d.recipient == recipient}


def models_of(config: PlatformConfig, share: DeltaDestination) -> dict[str, ModelConfig]:
    return {m.model_name: m for m in config.models_for(share)}


@dataclass
class Location:
    """Where a shared destination's tables are, and how its files are handed out."""

    destination: DeltaDestination
    root: str  # a folder, or s3://bucket/prefix, az://container/prefix
    options: dict[str, str] | None
    prefix: str
    _s3_presigner: Any = field(default=None, init=False, repr=False)

    @classmethod
    def of(cls, destination: DeltaDestination) -> Location:
        from transfer_platform.destinations.delta import DeltaWriter

        writer = DeltaWriter(destination)
        try:
            return cls(destination, str(writer.root), writer.options, getattr(writer, "prefix", ""))
        finally:
            writer.close()

    def table_uri(self, model: str) -> str:
        return f"{self.root}/{model}"

    def open(self, model: str) -> DeltaTable:
        from deltalake import DeltaTable

        uri = self.table_uri(model)
        if not DeltaTable.is_deltatable(uri, storage_options=self.options):
            raise not_found(f"table {model} (no transfer has written it yet)")
        return DeltaTable(uri, storage_options=self.options)

    def _presigner(self) -> Any:
        """A boto3 client of the destination's bucket that signs URLs with Signature Version 4
        (``X-Amz-Algorithm=AWS4-HMAC-SHA256``, ``X-Amz-Expires``): the only signature every S3
        region accepts (version 2, boto3's default for presigned URLs of some endpoints, is refused by
        regions opened since 2014 and by S3-compatible stores that dropped it)."""
        if self._s3_presigner is None:
            import boto3
            from botocore.config import Config

            connection = self.destination.connection
            credentials = connection.credentials(f"destination '{self.destination.name}'",
                                                 ("aws_access_key_id", "aws_secret_access_key"))
            self._s3_presigner = boto3.client(
                "s3", endpoint_url=connection.endpoint_url, region_name=connection.region, **credentials,
                config=Config(signature_version="s3v4",
                              s3={"addressing_style": "path" if connection.path_style else "auto"}))
        return self._s3_presigner

    def file_url(self, public_url: str, model: str, relative: str, seconds: int) -> str:
        """A URL of the file ``relative`` (to the table's root) that works for ``seconds``."""
        connection = self.destination.connection
        key = "/".join(p for p in (self.prefix, model, relative) if p)
        if isinstance(connection, S3Connection):
            return self._presigner().generate_presigned_url(
                "get_object", Params={"Bucket": connection.bucket, "Key": key}, ExpiresIn=seconds)
        if isinstance(connection, AzureBlobConnection):
            from azure.storage.blob import BlobSasPermissions, generate_blob_sas

            sas = generate_blob_sas(connection.account_name, connection.container, key,
                                    account_key=connection.key(f"destination '{self.destination.name}'"),
                                    permission=BlobSasPermissions(read=True),
                                    expiry=datetime.now(UTC) + timedelta(seconds=seconds))
            return f"{connection.service_url}/{connection.container}/{quote(key)}?{sas}"
        expires = int(time.time()) + seconds
        path = f"{self.destination.name}/{model}/{relative}"
        return f"{public_url.rstrip('/')}/delta-sharing/files/{quote(path)}?expires={expires}&sig={sign(path, expires)}"


# -- a folder's files: URLs of the API, signed --------------------------------------------------


def _url_key() -> bytes:
    """The key of file URLs: derived from the platform's secret key (every API process has it),
    the first of a comma-separated list."""
    text = os.environ.get(SECRET_KEY_ENV, "").strip().split(",")[0].strip()
    if not text:
        raise ConfigError([Problem(SECRET_KEY_ENV, "not set: a shared folder's file URLs cannot be signed",
                                   f"export {SECRET_KEY_ENV} (transfer-platform store new-key) for the API")])
    return hmac.new(text.encode(), b"transfer_platform delta-sharing file URLs", hashlib.sha256).digest()


def sign(path: str, expires: int) -> str:
    digest = hmac.new(_url_key(), f"{path}\n{expires}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def verify_file_url(path: str, expires: str, signature: str) -> str | None:
    """Why the URL is refused (forged or altered, expired), or None when it holds."""
    if not expires.isdigit() or not hmac.compare_digest(sign(path, int(expires)), signature):
        return "this URL's signature does not match it"
    if int(expires) <= time.time():
        return "this URL has expired"
    return None


def folder_file(location: Location, model: str, relative: str) -> Path | None:
    """The file ``relative`` of a folder's table, if it is one inside the table's folder."""
    table = Path(location.table_uri(model)).resolve()
    file = (table / relative).resolve()
    if table not in file.parents or not file.is_file() or "_delta_log" in file.relative_to(table).parts:
        return None
    return file


# -- a table's snapshot ------------------------------------------------------------------------


def _moment(text: str, name: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise bad_parameter(f"{name}: {text!r} is not an ISO-8601 time with its zone (2026-01-31T12:00:00Z)")
    return value


def version_at(table: DeltaTable, starting: str) -> int:
    """The first version committed at or after ``starting`` (the protocol's ``startingTimestamp``)."""
    moment = _moment(starting, "startingTimestamp").timestamp() * 1000
    versions = sorted((entry["version"], entry["timestamp"]) for entry in table.history())
    for version, at in versions:
        if at >= moment:
            return version
    raise bad_parameter(f"startingTimestamp {starting} is after the table's last version "
                        f"({versions[-1][0] if versions else 0})")


def snapshot(table: DeltaTable, version: int | None = None, timestamp: str | None = None) -> DeltaTable:
    """The table at ``version`` or at ``timestamp`` (the last version committed then), else its latest."""
    from deltalake.exceptions import DeltaError

    if version is not None and timestamp is not None:
        raise bad_parameter("send version or timestamp, not both")
    try:
        if version is not None:
            if version < 0 or version > table.version():
                raise bad_parameter(f"version {version} is not one of the table's (0 to {table.version()})")
            table.load_as_version(version)
        elif timestamp is not None:
            table.load_as_version(_moment(timestamp, "timestamp"))
    except (DeltaError, ValueError, OSError) as exc:  # delta-rs: a version vacuumed, a time before the first commit
        raise bad_parameter(f"cannot read that version of the table: {str(exc).splitlines()[0]}") from None
    return table


def _refuse_unreadable(table: DeltaTable) -> None:
    protocol = table.protocol()
    if protocol.min_reader_version > 1 and (protocol.reader_features or []):
        raise SharingError(400, "UNSUPPORTED_OPERATION",
                           f"the table needs reader features {protocol.reader_features}, which this server's "
                           "parquet answers cannot describe")


def header_lines(table: DeltaTable) -> list[dict[str, Any]]:
    """The answer's first lines: the protocol and the table's metadata (PROTOCOL.md's parquet format)."""
    _refuse_unreadable(table)
    metadata = table.metadata()
    meta: dict[str, Any] = {"id": metadata.id, "format": {"provider": "parquet"},
                            "schemaString": table.schema().to_json(),
                            "partitionColumns": list(metadata.partition_columns),
                            "configuration": dict(metadata.configuration or {}), "version": table.version()}
    if metadata.name:
        meta["name"] = metadata.name
    if metadata.description:
        meta["description"] = metadata.description
    return [{"protocol": {"minReaderVersion": 1}}, {"metaData": meta}]


def files(table: DeltaTable) -> list[dict[str, Any]]:
    """The snapshot's data files: ``path`` (relative), ``size``, ``rows``, ``partitionValues``."""
    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=True))
    found = []
    for row in actions.to_pylist():
        partitions = {k.removeprefix("partition."): (None if v is None else str(v))
                      for k, v in row.items() if k.startswith("partition.")}
        found.append({"path": row["path"], "size": int(row["size_bytes"]), "rows": row.get("num_records"),
                      "partitionValues": partitions})
    return found


def file_lines(location: Location, public_url: str, model: str, table_files: list[dict[str, Any]],
               seconds: int) -> Iterator[dict[str, Any]]:
    # whole seconds, as the stores sign them (S3's X-Amz-Date, Azure's se): never later than a URL's own expiry
    expires_ms = (int(time.time()) + seconds) * 1000
    for entry in table_files:
        stats = json.dumps({"numRecords": entry["rows"]}) if entry["rows"] is not None else None
        line = {"url": location.file_url(public_url, model, entry["path"], seconds),
                "id": hashlib.sha256(f"{model}/{entry['path']}".encode()).hexdigest()[:32],
                "partitionValues": entry["partitionValues"], "size": entry["size"],
                "expirationTimestamp": expires_ms}
        if stats:
            line["stats"] = stats
        yield {"file": line}
