"""The configuration file's schema: sources, models, recipients and destinations.

Field names follow the reference system (Prequel) so that its users feel at home.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    Tag,
    field_validator,
    model_validator,
)

from transfer_platform import vendors
from transfer_platform.config.endpoints import parse_endpoint
from transfer_platform.config.secrets import EnvRef
from transfer_platform.core.durations import parse_duration_seconds
from transfer_platform.core.last_modified import LastModified
from transfer_platform.core.types import canonical_type

Name = Annotated[
    str,
    Field(pattern=r"^[A-Za-z0-9_]+$", min_length=1, max_length=120,
          description="letters, digits and underscores"),
]

FREQUENCIES_MINUTES = (0, 15, 60, 360, 720, 1440)


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- connections -----------------------------------------------------------------------------


class DatabaseConnection(StrictModel):
    host: str
    port: int = Field(gt=0, lt=65536)
    database: str
    username: str
    password: EnvRef | None = None
    schema_: str | None = Field(default=None, alias="schema")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class PathConnection(StrictModel):
    path: Path


_PREFIX = r"^[A-Za-z0-9!_.*'()/-]*$"


class S3Connection(StrictModel):
    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    prefix: str = Field(default="", pattern=_PREFIX)
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


def _folder_or_bucket(value: object) -> str:
    """A connection with a ``bucket`` is an S3 one, any other a folder's (errors name its fields)."""
    has_bucket = isinstance(value, S3Connection) or (isinstance(value, dict) and "bucket" in value)
    return "bucket" if has_bucket else "folder"


FolderOrBucket = Annotated[Annotated[PathConnection, Tag("folder")] | Annotated[S3Connection, Tag("bucket")],
                           Discriminator(_folder_or_bucket)]


class AzureBlobConnection(StrictModel):
    """A container of an Azure Storage account (Blob Storage), with the account's shared key."""

    account_name: str = Field(pattern=r"^[a-z0-9]{3,24}$")
    container: str = Field(pattern=r"^[a-z0-9](-?[a-z0-9])+$", min_length=3, max_length=63)
    prefix: str = Field(default="", pattern=_PREFIX)
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


def _delta_connection(value: object) -> str:
    """Delta's connection: a ``container`` makes it an Azure one, else as :data:`FolderOrBucket`."""
    has_container = isinstance(value, AzureBlobConnection) or (isinstance(value, dict) and "container" in value)
    return "container" if has_container else _folder_or_bucket(value)


DeltaConnection = Annotated[Annotated[PathConnection, Tag("folder")] | Annotated[S3Connection, Tag("bucket")]
                            | Annotated[AzureBlobConnection, Tag("container")], Discriminator(_delta_connection)]


# -- sources ---------------------------------------------------------------------------------


class _SourceBase(StrictModel):
    name: Name
    max_concurrent_transfers: int = Field(default=10, ge=1)
    max_concurrent_queries_per_transfer: int = Field(default=1, ge=1)
    lookback_window: int | None = Field(
        default=None, ge=0, description="seconds or ISO-8601 duration; default by vendor"
    )
    tenancy: Literal["multi_tenant", "schema_tenanted"] = "multi_tenant"

    @field_validator("lookback_window", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        return None if value is None else parse_duration_seconds(value)  # type: ignore[arg-type]

    @property
    def vendor_record(self) -> vendors.Vendor:
        """What the platform knows of this source's vendor (``transfer_platform/vendors.py``)."""
        return vendors.SOURCES[self.vendor]  # type: ignore[attr-defined]

    @property
    def lookback_seconds(self) -> int:
        if self.lookback_window is not None:
            return self.lookback_window
        return self.vendor_record.default_lookback_seconds


class SourceStaging(StrictModel):
    """Source staging (off unless set): the due incremental transfers of a model read its changed
    rows for all their tenants in one query, staged as Parquet per tenant in ``path`` (a local or
    mounted folder shared by every process that runs transfers) or in the bucket ``s3`` (the
    connection fields of an S3 destination), each transfer taking its tenant's rows from there
    (``transfer_platform/sources/staging.py``). Exactly one of ``path`` and ``s3``."""

    path: str | None = Field(default=None, min_length=1,
                             description="a folder shared by the processes that run transfers")
    s3: S3Connection | None = Field(default=None, description="a bucket every process that runs transfers reaches")
    max_age_hours: float = Field(default=24, gt=0, le=24 * 7)

    @field_validator("path")
    @classmethod
    def _folder(cls, value: str | None) -> str | None:
        if value is not None and "://" in value:
            raise ValueError(f"staging.path {value!r} is not a folder: a bucket is given as staging.s3 "
                             "(staging: {s3: {bucket: ..., prefix: ..., endpoint_url: ..., access_key_id: "
                             "${VAR}, secret_access_key: ${VAR}}}); path is for a local or mounted folder")
        return value

    def place(self) -> Place:
        """Where the staged rows live (``validate`` refuses a destination there: its recipient
        would see every tenant's rows)."""
        return self.s3.place() if self.s3 is not None else folder_place(Path(self.path), "staging folder")

    @model_validator(mode="after")
    def _one_place(self) -> SourceStaging:
        if (self.path is None) == (self.s3 is None):
            which = "both" if self.path is not None else "neither"
            raise ValueError(f"staging needs exactly one of path (a folder) and s3 (a bucket: {{bucket, prefix, "
                             f"region, endpoint_url, access_key_id, secret_access_key, path_style}}); it has {which}")
        return self


class PostgresSource(_SourceBase):
    vendor: Literal["postgres"]
    connection: DatabaseConnection
    staging: SourceStaging | None = None

    @model_validator(mode="after")
    def _staged_tenancy(self) -> PostgresSource:
        if self.staging is not None and self.tenancy != "multi_tenant":
            raise ValueError("staging reads several tenants in one query: it needs tenancy: multi_tenant "
                             "(this source is schema-tenanted); remove staging from the source")
        return self


class MysqlSource(_SourceBase):
    vendor: Literal["mysql"]
    connection: DatabaseConnection


class ParquetSource(_SourceBase):
    """A Parquet "lake" in a folder or an S3 bucket: one folder of Parquet files per ``source_table``."""

    vendor: Literal["parquet"]
    connection: FolderOrBucket


#: the ``vendor:`` value chooses the class (each vendor's record names its class: ``vendors.py``)
SourceConfig = Annotated[PostgresSource | MysqlSource | ParquetSource, Field(discriminator="vendor")]

# -- models ----------------------------------------------------------------------------------


class ColumnConfig(StrictModel):
    name_in_source: str = Field(min_length=1)
    name_in_destination: str | None = Field(default=None, min_length=1)
    data_type: str
    is_primary_key: bool = False
    is_last_modified: bool = False
    # what the last-modified column holds (see core/last_modified.py); default from data_type:
    # timestamp, date, or text in datetime_format; an integer column must say its epoch unit
    last_modified_format: Literal["timestamp", "date", "epoch_s", "epoch_ms", "epoch_us", "text"] | None = None
    datetime_format: str | None = Field(default=None, min_length=1,
                                        description="strftime codes of a text last-modified column")
    # a soft delete: a boolean column (deleted when true) or a timestamp column (deleted when not NULL)
    is_deleted_marker: bool = False

    @field_validator("data_type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        return canonical_type(value)

    @property
    def destination_name(self) -> str:
        return self.name_in_destination or self.name_in_source


class ModelConfig(StrictModel):
    model_name: Name
    description: str = ""
    columns: list[ColumnConfig] = Field(min_length=1)
    source_name: str
    source_table: str | None = None
    source_query: str | None = None
    organization_column: str | None = None
    max_transfer_time_window_seconds: int | None = Field(
        default=None, description="seconds or ISO-8601 duration; unset = one window per transfer"
    )
    min_start_time_epoch: int = Field(default=0, ge=0)
    is_append_only: bool = False
    # a destination column the model no longer has is dropped by an incremental transfer only with
    # this (a full refresh rebuilds the table anyway); without it such a transfer is refused
    allow_column_drop: bool = False
    # with a column marked is_deleted_marker: deliver marked rows with the marker instead of removing them
    keep_deleted_rows: bool = False
    # hard deletes (rows gone from the source): "sweep" compares the tenant's keys on a schedule
    delete_detection: Literal["none", "sweep"] = "none"
    delete_sweep_frequency_minutes: Literal[15, 60, 360, 720, 1440] = 1440

    @field_validator("max_transfer_time_window_seconds", mode="before")
    @classmethod
    def _window(cls, value: object) -> object:
        if value is None:
            return None
        seconds = parse_duration_seconds(value)  # type: ignore[arg-type]
        if seconds <= 0:
            raise ValueError(f"a window must be at least 1 second, got {seconds}")
        return seconds

    @property
    def primary_key(self) -> list[ColumnConfig]:
        return [c for c in self.columns if c.is_primary_key]

    @property
    def last_modified(self) -> ColumnConfig:
        return next(c for c in self.columns if c.is_last_modified)

    @property
    def deletion_marker(self) -> ColumnConfig | None:
        """The column whose value marks a row as deleted in the source (a soft delete), if any."""
        return next((c for c in self.columns if c.is_deleted_marker), None)

    @property
    def removes_deleted_rows(self) -> bool:
        """Rows marked deleted are removed from the destination (not kept with their marker)."""
        return self.deletion_marker is not None and not self.keep_deleted_rows

    @property
    def change_column(self) -> LastModified:
        """The kind of the last-modified column (the configuration is validated first)."""
        return last_modified_kind(self.last_modified)


def last_modified_kind(column: ColumnConfig) -> LastModified:
    """A last-modified column's kind: ``last_modified_format``, else the one its data_type implies.
    Raises ``ValueError(what is wrong, the fix)`` for an integer column without an epoch unit, a
    type that holds no time, or a format that cannot be compared as text."""
    kind = column.last_modified_format or {"timestamp": "timestamp", "date": "date",
                                           "string": "text"}.get(column.data_type)
    if kind is None and column.data_type == "integer":
        raise ValueError("an integer last-modified column needs the unit of its epoch values",
                         "add last_modified_format: epoch_s, epoch_ms or epoch_us")
    if kind is None:
        raise ValueError(f"a last-modified column cannot be {column.data_type!r}",
                         "give it data_type timestamp, date, integer (an epoch) or string (formatted text)")
    try:
        return LastModified(kind, column.datetime_format)
    except ValueError as exc:
        raise ValueError(str(exc), "write the values as ISO-8601 text (the default format, "
                         "%Y-%m-%dT%H:%M:%S.%f%z, in UTC), or convert them in a source_query") from None


# -- recipients and destinations -------------------------------------------------------------


class RecipientConfig(StrictModel):
    name: Name
    id_in_provider_system: str = Field(min_length=1)
    default_full_refresh_min_start_time_epoch: int | None = Field(default=None, ge=0)


_LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}


@dataclass(frozen=True)
class Place:
    """Where a destination's data and watermarks physically live (``validate`` refuses two
    destinations whose places overlap: their rows and watermarks would mix)."""

    kind: str  # "postgres", "file", "s3"
    container: tuple  # (host, port, database), (), (endpoint, bucket)
    path: tuple[str, ...]  # (schema,), a folder's parts, a prefix's parts
    description: str

    def overlaps(self, other: Place) -> bool:
        """The same place, or one inside the other (a folder or prefix within another's)."""
        if (self.kind, self.container) != (other.kind, other.container):
            return False
        shorter = min(len(self.path), len(other.path))
        return self.path[:shorter] == other.path[:shorter]


def folder_place(path: Path, what: str) -> Place:
    folder = os.path.normpath(os.path.abspath(path))
    return Place("file", (), tuple(Path(folder).parts), f"{what} {folder}")


class _DestinationBase(StrictModel):
    """What every destination has; a vendor's class adds its ``vendor`` and ``connection``, and
    says where it writes (:meth:`place`) and what else ``validate`` checks (:meth:`problems`)."""

    name: Name
    recipient: str
    is_enabled: bool = True
    frequency_minutes: Literal[0, 15, 60, 360, 720, 1440] = 0
    # integrity checks of every model, launched by the sensor (null: only on demand)
    integrity_check_frequency_minutes: Literal[15, 60, 360, 720, 1440] | None = 1440
    # a failed integrity check re-transfers the windows holding the broken rows, then checks again
    self_healing: bool = True
    max_repairs_per_day: int = Field(default=3, ge=1, description="repair cycles per model per UTC day")
    enabled_models: list[str] = Field(default_factory=list)
    max_concurrent_transfers: int = Field(default=1, ge=1)
    max_concurrent_queries_per_transfer: int = Field(default=1, ge=1)

    @property
    def vendor_record(self) -> vendors.Vendor:
        """What the platform knows of this destination's vendor (``transfer_platform/vendors.py``)."""
        return vendors.DESTINATIONS[self.vendor]  # type: ignore[attr-defined]

    def place(self) -> Place:
        raise NotImplementedError

    def problems(self, path: str) -> list:  # -> list[Problem]
        """What ``validate`` finds wrong with this destination beyond its schema (``path``: where
        it is in the file); nothing by default."""
        return []


class PostgresDestination(_DestinationBase):
    vendor: Literal["postgres"]
    connection: DatabaseConnection

    def place(self) -> Place:
        c = self.connection
        host = c.host.strip().lower()
        host = "loopback" if host in _LOOPBACK else host
        schema = c.schema_ or "public"
        return Place("postgres", (host, c.port, c.database), (schema,),
                     f"PostgreSQL {host}:{c.port}, database {c.database}, schema {schema}")


class MysqlDestination(_DestinationBase):
    """A MySQL or MariaDB database: the recipient's (``connection.database``, created beforehand),
    one table per model beside ``_transfer_status``."""

    vendor: Literal["mysql"]
    connection: DatabaseConnection

    def place(self) -> Place:
        c = self.connection
        host = c.host.strip().lower()
        host = "loopback" if host in _LOOPBACK else host
        return Place("mysql", (host, c.port), (c.database,), f"MySQL {host}:{c.port}, database {c.database}")


class DeltaDestination(_DestinationBase):
    """Delta Lake tables under ``path`` (one table per model), written with delta-rs."""

    vendor: Literal["delta"]
    connection: DeltaConnection  # a bucket: the tables under s3://<bucket>/<prefix>/ (az://<container>/...)

    def place(self) -> Place:
        if isinstance(self.connection, S3Connection | AzureBlobConnection):
            return self.connection.place()
        return folder_place(self.connection.path, "folder")


class IcebergConnection(StrictModel):
    """An Iceberg SQL catalog in PostgreSQL, and the warehouse its tables' files are in."""

    catalog: DatabaseConnection  # the catalog's database (``schema``: where its two tables are)
    catalog_name: Name = "transfer_platform"  # the catalog's name in those tables
    namespace: Name | None = None  # the recipient's namespace (default: the destination's recipient)
    warehouse: FolderOrBucket  # a folder, or s3://<bucket>/<prefix>/


class IcebergDestination(_DestinationBase):
    """Apache Iceberg tables (one per model) in a namespace of a SQL catalog, written with pyiceberg."""

    vendor: Literal["iceberg"]
    connection: IcebergConnection

    @property
    def namespace(self) -> str:
        return self.connection.namespace or self.recipient

    def place(self) -> Place:
        c = self.connection.catalog
        host = c.host.strip().lower()
        host = "loopback" if host in _LOOPBACK else host
        schema = c.schema_ or "public"
        return Place("iceberg", (host, c.port, c.database, schema, self.connection.catalog_name),
                     (self.namespace,), f"Iceberg catalog {self.connection.catalog_name} in PostgreSQL "
                     f"{host}:{c.port}, database {c.database}, schema {schema}, namespace {self.namespace}")


class _ObjectStorageBase(_DestinationBase):
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


class LocalStorageConnection(StrictModel):
    path: Path
    prefix: str = Field(default="", pattern=_PREFIX)


class LocalStorageDestination(_ObjectStorageBase):
    """Object storage in a folder (a mounted bucket, a test, the demo)."""

    vendor: Literal["local"]
    connection: LocalStorageConnection

    def place(self) -> Place:
        return folder_place(self.connection.path / self.connection.prefix.strip("/"), "folder")


class S3Destination(_ObjectStorageBase):
    """Object storage in an S3 (or S3-compatible) bucket."""

    vendor: Literal["s3"]
    connection: S3Connection

    def place(self) -> Place:
        return self.connection.place()


class AzureBlobDestination(_ObjectStorageBase):
    """Object storage in an Azure Blob Storage container."""

    vendor: Literal["abs"]
    connection: AzureBlobConnection

    def place(self) -> Place:
        return self.connection.place()


class DuckdbConnection(StrictModel):
    path: Path  # the database file (one per recipient), created by the first transfer
    schema_: str | None = Field(default=None, alias="schema", min_length=1)  # default: main

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class DuckdbDestination(_DestinationBase):
    """A DuckDB database file (one table per model in ``schema``), written with the duckdb package."""

    vendor: Literal["duckdb"]
    connection: DuckdbConnection

    def place(self) -> Place:
        return folder_place(self.connection.path, "DuckDB file")

    def problems(self, path: str) -> list:
        from transfer_platform.errors import Problem

        if self.connection.path.is_dir():
            return [Problem(f"{path}.connection.path", f"{self.connection.path} is a folder; a DuckDB "
                            "destination writes one database file",
                            "give the file's path, such as <folder>/<recipient>.duckdb")]
        return []


#: the ``vendor:`` value chooses the class (each vendor's record names its class: ``vendors.py``)
DestinationConfig = Annotated[PostgresDestination | MysqlDestination | DeltaDestination | LocalStorageDestination
                              | S3Destination | AzureBlobDestination | IcebergDestination | DuckdbDestination,
                              Field(discriminator="vendor")]


class SparkSettings(StrictModel):
    """Where transfers run their Spark work.

    Without ``remote`` (the default): a Spark Connect server on this machine that the first
    process needing Spark starts in the background and later ones reuse (``shared``; one per
    version and JVM settings, :mod:`transfer_platform.runtime.shared_spark`), stopped by itself after
    ``shared_idle_seconds`` without a query or a client; with ``shared: false``
    (``--no-shared-spark``, ``$TRANSFER_PLATFORM_SHARED_SPARK=0``), a Spark started inside each
    process that transfers (~11 s of start-up per process). With ``remote`` (``sc://host:port``):
    a long-lived Spark Connect server that every run shares; ``master``, ``driver_memory`` and
    ``conf`` then describe that server (``transfer-platform spark-server`` starts it with them).
    ``$TRANSFER_PLATFORM_SPARK_REMOTE`` overrides ``remote``."""

    master: str = "local[2]"
    driver_memory: str = "2g"
    conf: dict[str, str] = Field(default_factory=dict)
    remote: str | None = None
    shared: StrictBool = True
    shared_idle_seconds: StrictInt = Field(1800, ge=10, le=7 * 86400)

    @field_validator("remote")
    @classmethod
    def _remote_endpoint(cls, value: str | None) -> str | None:
        if value is not None:
            parse_endpoint(value)
        return value


class DagsterSettings(StrictModel):
    """How long Dagster keeps finished runs and their event logs (Dagster keeps them forever by
    itself): the ``transfer_schedule`` sensor deletes, on each tick, at most
    ``runs_deleted_per_tick`` finished runs created more than ``run_retention_days`` days ago,
    oldest first (:mod:`transfer_platform.orchestration.retention`)."""

    run_retention_days: int = Field(30, ge=1)
    runs_deleted_per_tick: int = Field(200, ge=1, le=10_000)


class StoreSettings(StrictModel):
    """The control plane's store (``transfer_platform/store``): a PostgreSQL database, often the
    one the Dagster instance uses, and a schema of its own (default ``transfer_platform``).
    Recipients, destinations, sources and models created through the REST API live there; the
    platform's configuration is then this file's entries plus the store's."""

    connection: DatabaseConnection


class ApiSettings(StrictModel):
    """The REST API (``transfer-platform api``)."""

    #: the address recipients open magic links at (the API's, as the internet sees it)
    public_url: str = Field("http://127.0.0.1:8000", pattern=r"^https?://")
    #: the Dagster webserver the API asks to reload the code location after a change (its
    #: GraphQL endpoint); without it, changes reach Dagster at its next reload
    dagster_url: str | None = Field(default=None, pattern=r"^https?://")
    #: how long a magic link stays usable
    magic_link_hours: float = Field(24, gt=0, le=24 * 30)


class PlatformConfig(StrictModel):
    sources: list[SourceConfig] = Field(default_factory=list)
    models: list[ModelConfig] = Field(default_factory=list)
    recipients: list[RecipientConfig] = Field(default_factory=list)
    destinations: list[DestinationConfig] = Field(default_factory=list)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    dagster: DagsterSettings = Field(default_factory=DagsterSettings)
    store: StoreSettings | None = None
    api: ApiSettings = Field(default_factory=ApiSettings)

    # -- look-ups (the file is validated first, so these names exist) --------------------------

    def source(self, name: str) -> PostgresSource | MysqlSource | ParquetSource:
        return next(s for s in self.sources if s.name == name)

    def model(self, name: str) -> ModelConfig:
        return next(m for m in self.models if m.model_name == name)

    #: recipient name -> position, for :meth:`recipient` (the definitions look up every
    #: destination's recipient: a scan each time is quadratic at 10,000 recipients)
    _recipient_at: dict[str, int] = PrivateAttr(default_factory=dict)

    def recipient(self, name: str) -> RecipientConfig:
        at = self._recipient_at.get(name)
        if at is None or at >= len(self.recipients) or self.recipients[at].name != name:
            # first use, or the list changed since: index it again (the first of a repeated name)
            self._recipient_at = {r.name: i for i, r in reversed(list(enumerate(self.recipients)))}
            at = self._recipient_at.get(name)
        if at is None:
            raise StopIteration(name)  # as the scan it replaces: the file is validated first
        return self.recipients[at]

    #: destination name -> position, for :meth:`destination` (the sensor looks up every destination
    #: on each tick: a scan each time is quadratic at 10,000 destinations)
    _destination_at: dict[str, int] = PrivateAttr(default_factory=dict)

    def destination(self, name: str) -> DestinationConfig:
        for attempt in range(2):
            at = self._destination_at.get(name)
            if at is not None and at < len(self.destinations) and self.destinations[at].name == name:
                return self.destinations[at]
            if attempt == 0:  # first use, or the list changed since: index it again
                self._destination_at = {d.name: i for i, d in reversed(list(enumerate(self.destinations)))}
        known = ", ".join(d.name for d in self.destinations) or "(none)"
        from transfer_platform.errors import ConfigError

        raise ConfigError(f"unknown destination {name!r}; configured destinations: {known}")

    def models_for(self, destination: _DestinationBase) -> list[ModelConfig]:
        """The models a destination receives (``enabled_models`` empty = all)."""
        wanted = destination.enabled_models
        return [m for m in self.models if not wanted or m.model_name in wanted]
