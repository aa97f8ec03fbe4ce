"""What every entry of the configuration file is built on, and what every source and destination
entry has: its name, the place it writes to, and its vendor's record.

A vendor's own configuration class (``transfer_platform/vendors/<vendor>.py``) adds its
``vendor`` and ``connection`` to :class:`SourceBase` or :class:`DestinationBase`; the
``vendor:`` unions of :mod:`transfer_platform.config.models` are built from the vendor registry.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator
from pydantic_core import PydanticCustomError

from transfer_platform.core.durations import parse_duration_seconds

if TYPE_CHECKING:
    from transfer_platform.vendors.record import Extra, Vendor

Name = Annotated[
    str,
    Field(pattern=r"^[A-Za-z0-9_]+$", min_length=1, max_length=120,
          description="letters, digits and underscores"),
]


def refusal(message: str, fix: str) -> PydanticCustomError:
    """What a validator raises to refuse a value with its fix apart (the problem's ``fix``), where a
    ``ValueError`` has only a message."""
    return PydanticCustomError("refused", "{message}", {"message": message, "fix": fix})


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- places ----------------------------------------------------------------------------------

LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}


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


def server_host(host: str) -> str:
    """A server's host as places compare it: lower case, every loopback name the same."""
    host = host.strip().lower()
    return "loopback" if host in LOOPBACK else host


# -- sources and destinations ----------------------------------------------------------------


class VendorEntry(StrictModel):
    """What every source and destination has: its name and its vendor's record; a vendor's class
    adds its ``vendor`` and ``connection``."""

    RECORD: ClassVar[Vendor]  # set by the registry on each vendor's class
    if TYPE_CHECKING:  # declared by each vendor's class (not fields here: they would come first)
        vendor: str
        connection: Any
    name: Name

    @property
    def vendor_record(self) -> Vendor:
        """What the platform knows of this entry's vendor: its record, which the registry
        (``transfer_platform/vendors/``) sets on its configuration class."""
        return type(self).RECORD

    def extras(self) -> tuple[Extra, ...]:
        """The install's extras its vendor's client comes from (``validate`` checks each is
        installed): its record's, by default."""
        return (self.vendor_record.extra,) if self.vendor_record.extra else ()


class SourceBase(VendorEntry):
    """What every source has; a vendor's class adds its ``vendor`` and ``connection``."""

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
    def lookback_seconds(self) -> int:
        if self.lookback_window is not None:
            return self.lookback_window
        return self.vendor_record.default_lookback_seconds


class DatabaseSourceBase(SourceBase):
    """A source read over a database connection (PostgreSQL, MySQL)."""

    #: 10 minutes by default: longer than any query of a transfer should wait for its first row,
    #: short enough that a stalled source ends its run within the hour
    read_timeout_seconds: int = Field(
        default=600, ge=1, le=86_400,
        description="the longest a read waits for the database's next bytes before the transfer fails "
                    "(a source that stops answering); transfer_platform/runtime/read_timeouts.py")


class DestinationBase(VendorEntry):
    """What every destination has; a vendor's class adds its ``vendor`` and ``connection``, and
    says where it writes (:meth:`place`) and what else ``validate`` checks (:meth:`problems`)."""

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
    #: the address policy it follows (``network.addresses.apply_policy``); ``None``: not checked
    _address_policy: object = PrivateAttr(default=None)

    @property
    def address_policy(self):  # -> AddressPolicy | None
        return self._address_policy

    def place(self) -> Place:
        raise NotImplementedError

    def problems(self, path: str) -> list:  # -> list[Problem]
        """What ``validate`` finds wrong with this destination beyond its schema (``path``: where
        it is in the file); nothing by default."""
        return []
