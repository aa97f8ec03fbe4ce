"""The configuration file's schema: sources, models, recipients and destinations.

A source's or destination's class is its vendor's (``transfer_platform/vendors/``): the
``vendor:`` value chooses it among the registry's. Field names follow the reference system
(Prequel) so that its users feel at home.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias, Union

from pydantic import (
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    field_validator,
)

from transfer_platform.config.connection_settings import DatabaseConnection
from transfer_platform.config.endpoints import parse_endpoint
from transfer_platform.config.entries import DestinationBase, Name, SourceBase, StrictModel
from transfer_platform.core.durations import parse_duration_seconds
from transfer_platform.core.last_modified import LastModified
from transfer_platform.core.types import canonical_type
from transfer_platform.vendors import DESTINATIONS, SOURCES, Vendor

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


# -- recipients ------------------------------------------------------------------------------


class RecipientConfig(StrictModel):
    name: Name
    id_in_provider_system: str = Field(min_length=1)
    default_full_refresh_min_start_time_epoch: int | None = Field(default=None, ge=0)


# -- sources and destinations: each vendor's class, chosen by the ``vendor:`` value ------------


def _chosen_by_vendor(registry: Mapping[str, Vendor]) -> object:
    """The union of the configuration classes of a registry's vendors, discriminated by ``vendor``
    (in the registry's order: its JSON schema lists them so)."""
    classes = tuple(dict.fromkeys(record.config for record in registry.values()))
    return Annotated[Union[classes], Field(discriminator="vendor")]  # noqa: UP007 (a union built at run time)


if TYPE_CHECKING:  # what a type checker knows of a union built at run time: its members' base
    SourceConfig: TypeAlias = SourceBase
    DestinationConfig: TypeAlias = DestinationBase
else:
    #: a source: the ``vendor:`` value chooses the class (each vendor's record names its class)
    SourceConfig = _chosen_by_vendor(SOURCES)

    #: a destination: the ``vendor:`` value chooses the class (each vendor's record names its class)
    DestinationConfig = _chosen_by_vendor(DESTINATIONS)


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
    shared_idle_seconds: StrictInt = Field(default=1800, ge=10, le=7 * 86400)

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
    oldest first (:mod:`transfer_platform.orchestration.instance.retention`)."""

    run_retention_days: int = Field(default=30, ge=1)
    runs_deleted_per_tick: int = Field(default=200, ge=1, le=10_000)


class StoreSettings(StrictModel):
    """The control plane's store (``transfer_platform/store``): a PostgreSQL database, often the
    one the Dagster instance uses, and a schema of its own (default ``transfer_platform``).
    Recipients, destinations, sources and models created through the REST API live there; the
    platform's configuration is then this file's entries plus the store's."""

    connection: DatabaseConnection


class ApiSettings(StrictModel):
    """The REST API (``transfer-platform api``)."""

    #: the address recipients open magic links at (the API's, as the internet sees it)
    public_url: str = Field(default="http://127.0.0.1:8000", pattern=r"^https?://")
    #: the Dagster webserver the API asks to reload the code location after a change (its
    #: GraphQL endpoint); without it, changes reach Dagster at its next reload
    dagster_url: str | None = Field(default=None, pattern=r"^https?://")
    #: how long a magic link stays usable
    magic_link_hours: float = Field(default=24, gt=0, le=24 * 30)
    #: wrong API keys, scoped auth tokens or magic-link tokens one client address may send in a
    #: minute before each further wrong one gets 429 (counted in each API process)
    failed_credentials_per_minute: int = Field(default=20, ge=1)


class DestinationAddressSettings(StrictModel):
    """Where a destination may make the platform connect (:mod:`transfer_platform.network.addresses`).

    A destination entered through a magic link may reach only global addresses: not loopback,
    private, link-local (cloud metadata), unspecified, multicast or reserved ones, nor the
    host:port of the store, Dagster's storage or a source; and no local file path. ``allow``
    opens addresses or networks, each with a port or for every port (``10.1.0.0/16``,
    ``127.0.0.1:5432``, ``[fd00::5]:5432``); ``allow_local_paths`` opens local paths;
    ``check_provider_destinations`` puts the provider's own destinations (the file's, the
    API's) under the same policy."""

    allow: list[str] = Field(default_factory=list)
    allow_local_paths: bool = False
    check_provider_destinations: bool = False

    @field_validator("allow")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        from transfer_platform.network.addresses import parse_allowed

        for entry in value:
            parse_allowed(entry)
        return value


class PlatformConfig(StrictModel):
    sources: list[SourceConfig] = Field(default_factory=list)
    models: list[ModelConfig] = Field(default_factory=list)
    recipients: list[RecipientConfig] = Field(default_factory=list)
    destinations: list[DestinationConfig] = Field(default_factory=list)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    dagster: DagsterSettings = Field(default_factory=DagsterSettings)
    store: StoreSettings | None = None
    api: ApiSettings = Field(default_factory=ApiSettings)
    destination_addresses: DestinationAddressSettings = Field(default_factory=DestinationAddressSettings)

    # -- look-ups (the file is validated first, so these names exist) --------------------------

    def source(self, name: str) -> SourceBase:
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

    def destination(self, name: str) -> DestinationBase:
        for attempt in range(2):
            at = self._destination_at.get(name)
            if at is not None and at < len(self.destinations) and self.destinations[at].name == name:
                return self.destinations[at]
            if attempt == 0:  # first use, or the list changed since: index it again
                self._destination_at = {d.name: i for i, d in reversed(list(enumerate(self.destinations)))}
        known = ", ".join(d.name for d in self.destinations) or "(none)"
        from transfer_platform.errors import ConfigError

        raise ConfigError(f"unknown destination {name!r}; configured destinations: {known}")

    def models_for(self, destination: DestinationBase) -> list[ModelConfig]:
        """The models a destination receives (``enabled_models`` empty = all)."""
        wanted = destination.enabled_models
        return [m for m in self.models if not wanted or m.model_name in wanted]
