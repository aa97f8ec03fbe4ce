"""The connection settings several entries share: a database server, a folder, an S3 bucket, an
Azure Blob Storage container, a Google Cloud Storage bucket, an SFTP server's folder (a vendor's own connection lives beside it, in
``transfer_platform/vendors/<vendor>.py``)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    field_validator,
    model_validator,
)

from transfer_platform.config.entries import Place, StrictModel, server_host
from transfer_platform.config.secrets import EnvRef

#: the characters of an object store's prefix
PREFIX_PATTERN = r"^[A-Za-z0-9!_.*'()/-]*$"


def server_name(host: str) -> str:
    """A host as a connection will resolve it: a name of labels of at most 63 characters (253 in
    all, IDNA), or an IP address; anything else is refused here, before any connection tries it."""
    if not host.strip():
        raise ValueError("the host is empty; write the server's name or IP address")
    try:
        encoded = host.strip().encode("idna")
    except UnicodeError:
        encoded = b""
    if not encoded or len(encoded) > 253:
        shown = host if len(host) <= 40 else f"{host[:40]}... ({len(host)} characters)"
        raise ValueError(f"{shown!r} is not a host name (each dot-separated label is 1 to 63 characters, "
                         "253 in all); write the server's name or IP address")
    return host


#: a server's host, checked as :func:`server_name` says
Host = Annotated[str, AfterValidator(server_name)]


class DatabaseConnection(StrictModel):
    host: Host
    port: int = Field(gt=0, lt=65536)
    database: str
    username: str
    password: EnvRef | None = None
    schema_: str | None = Field(default=None, alias="schema")
    #: a destination's under the address policy: the policy and the setting (``network.addresses.Guard``,
    #: set by ``apply_policy``); ``None``: the provider's own connection, never judged
    _address_guard: Any = PrivateAttr(default=None)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def address_guard(self) -> Any:
        return self._address_guard


class PathConnection(StrictModel):
    path: Path


class S3Connection(StrictModel):
    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    prefix: str = Field(default="", pattern=PREFIX_PATTERN)
    region: str = "us-east-1"
    endpoint_url: str | None = Field(default=None, pattern=r"^https?://", description="an S3-compatible store")
    access_key_id: EnvRef | None = None  # None: boto3's own chain (environment, profile, instance role)
    secret_access_key: EnvRef | None = None
    path_style: bool = False  # bucket in the path, not the host name (most S3-compatible stores)

    def credentials(self, owner: str, names: tuple[str, str], *, at: str = "connection") -> dict[str, str]:
        """{``names[0]``: access key id, ``names[1]``: secret}, each read from its variable, as a
        client library's keyword arguments or options; one not configured is left out (the
        client's own chain then finds it). ``owner`` names the source or destination in errors,
        ``at`` where in it these fields are."""
        refs = (self.access_key_id, self.secret_access_key)
        fields = ("access_key_id", "secret_access_key")
        return {name: ref.resolve(f"{owner}.{at}.{field}").get_secret_value()
                for name, ref, field in zip(names, refs, fields, strict=True) if ref is not None}

    def place(self) -> Place:
        prefix = tuple(p for p in self.prefix.split("/") if p)
        return Place("s3", ((self.endpoint_url or "aws").rstrip("/").lower(), self.bucket), prefix,
                     f"bucket {self.bucket}, prefix {self.prefix.strip('/') or '(none)'}")


class GcsConnection(StrictModel):
    """A Google Cloud Storage bucket, with a service account's JSON key."""

    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
    prefix: str = Field(default="", pattern=PREFIX_PATTERN)
    #: the service account's JSON key, read from this variable; left out only with ``endpoint_url``
    #: (an emulator's, reached without credentials)
    credentials: EnvRef | None = None
    #: the JSON API's root (``http://127.0.0.1:4443`` for fake-gcs-server); default Google's
    endpoint_url: str | None = Field(default=None, pattern=r"^https?://")

    @model_validator(mode="after")
    def _credentials_or_emulator(self) -> GcsConnection:
        if self.credentials is None and self.endpoint_url is None:
            raise ValueError("credentials (a service account's JSON key: '${VARIABLE_NAME}') is required; "
                             "only an emulator's endpoint_url is reached without credentials")
        return self

    def place(self) -> Place:
        prefix = tuple(p for p in self.prefix.split("/") if p)
        return Place("gcs", ((self.endpoint_url or "google").rstrip("/").lower(), self.bucket), prefix,
                     f"GCS bucket {self.bucket}, prefix {self.prefix.strip('/') or '(none)'}")


def folder_or_bucket(value: object) -> str:
    """A connection with a ``bucket`` is an S3 one, any other a folder's (errors name its fields)."""
    has_bucket = isinstance(value, S3Connection) or (isinstance(value, dict) and "bucket" in value)
    return "bucket" if has_bucket else "folder"


FolderOrBucket = Annotated[Annotated[PathConnection, Tag("folder")] | Annotated[S3Connection, Tag("bucket")],
                           Discriminator(folder_or_bucket)]


class AzureBlobConnection(StrictModel):
    """A container of an Azure Storage account (Blob Storage), with the account's shared key."""

    account_name: str = Field(pattern=r"^[a-z0-9]{3,24}$")
    container: str = Field(pattern=r"^[a-z0-9](-?[a-z0-9])+$", min_length=3, max_length=63)
    prefix: str = Field(default="", pattern=PREFIX_PATTERN)
    account_key: EnvRef  # the storage account's access key (base64), read from this variable
    #: the Blob service's URL including the account (``http://127.0.0.1:10000/devstoreaccount1``
    #: for Azurite); default ``https://<account_name>.blob.core.windows.net``
    endpoint_url: str | None = Field(default=None, pattern=r"^https?://")

    @property
    def service_url(self) -> str:
        return (self.endpoint_url or f"https://{self.account_name}.blob.core.windows.net").rstrip("/")

    def key(self, owner: str) -> str:
        """The account key, read from its variable (``owner`` names the destination in errors)."""
        return self.account_key.resolve(f"{owner}.connection.account_key").get_secret_value()

    def place(self) -> Place:
        prefix = tuple(p for p in self.prefix.split("/") if p)
        return Place("azure", (self.service_url.lower(), self.container), prefix,
                     f"Azure container {self.container} of account {self.account_name}, "
                     f"prefix {self.prefix.strip('/') or '(none)'}")


class SFTPConnection(StrictModel):
    """A folder on an SFTP server, reached with a private key (the user's, often chrooted), the
    server known by its public host key (never accepted unseen)."""

    host: Host
    port: int = Field(default=22, gt=0, lt=65536)
    username: str
    private_key: EnvRef  # the private key's text (OpenSSH or PEM), read from this variable
    password: EnvRef | None = None  # the private key's passphrase, or a password the server asks besides
    #: the server's public host key, as ``ssh-keyscan`` or its ``ssh_host_*_key.pub`` says it
    #: (``ssh-ed25519 AAAA...``): the only key accepted from the server
    known_host_key: str = Field(pattern=r"^(ssh-[a-z0-9-]+|ecdsa-sha2-nistp[0-9]+) [A-Za-z0-9+/]+=*( .*)?$")
    #: the folder transfers write under, as the user sees it (inside a chroot: the path below it);
    #: absolute, on the server (never taken as a local path)
    path: PurePosixPath
    prefix: str = Field(default="", pattern=PREFIX_PATTERN)

    @field_validator("path")
    @classmethod
    def _absolute(cls, path: PurePosixPath) -> PurePosixPath:
        if not path.is_absolute():
            raise ValueError("the folder on the server must be absolute (start with '/')")
        return path

    def place(self) -> Place:
        folder = tuple(p for p in f"{self.path}/{self.prefix}".split("/") if p)
        return Place("sftp", (server_host(self.host), self.port, self.username), folder,
                     f"SFTP folder {self.path} on {self.host}:{self.port}, prefix {self.prefix.strip('/') or '(none)'}")
