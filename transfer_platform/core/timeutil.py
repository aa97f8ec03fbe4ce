"""UTC datetimes and microsecond epochs: the only time representations the platform uses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime; a naive value is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def from_epoch_seconds(seconds: int | float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def to_epoch_us(value: datetime) -> int:
    """Microseconds since the epoch, exactly (no float rounding)."""
    delta = utc(value) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_epoch_us(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def isoformat(value: datetime | None) -> str | None:
    """ISO-8601 with microseconds, ``None`` for unset (never confuse unset with epoch 0)."""
    return None if value is None else utc(value).isoformat(timespec="microseconds")
