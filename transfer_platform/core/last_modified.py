"""What a last-modified column holds, and how an instant becomes one of its values (pure).

The platform plans in UTC instants (windows, watermarks, the lookback); a source's last-modified
column may hold other things, as the cursor seed's ``datetime_format`` and ``cursor_granularity``
allow. Each kind is compared **in the column's own type**, so that the source's index on it is
used: an epoch-ms column with a bigint, a ``date`` column with a date, text with text.

====================  ===============  =====================================  ===========
``kind``              ``data_type``    a value means the instant              grain
====================  ===============  =====================================  ===========
``timestamp``         timestamp        itself (UTC; a zone-less value is UTC)  1 µs
``date``              date             midnight UTC of that day               1 day
``epoch_s/ms/us``     integer          that many s/ms/µs after 1970-01-01      1 s/ms/µs
``text``              string           ``datetime_format`` (strftime), UTC     its last field
====================  ===============  =====================================  ===========

Bounds: a value ``v`` (an instant on the grain) is inside ``[lower, upper)`` exactly when
``bound(lower) <= v < bound(upper)``, where ``bound`` rounds *up* to the grain. Windows therefore
still tile: every value belongs to exactly one window. The lookback of a coarse column is at
least its grain (a ``date`` column cannot tell the rows of one day apart, so the read re-reads the
whole last day).

Text is compared as text, which is time order only if every value is written the same way: the
fields from the year down (``%Y``, ``%m``, ``%d``, then optionally ``%H``, ``%M``, ``%S``, ``%f``),
fixed width, in UTC (``%z`` writes ``+0000``). :func:`format_problem` refuses formats that do not
sort; a value that is not exactly what the format writes for a UTC instant is refused at read time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from transfer_platform.core.timeutil import EPOCH, from_epoch_us, to_epoch_us, utc

KINDS = ("timestamp", "date", "epoch_s", "epoch_ms", "epoch_us", "text")
#: the data_type each kind needs (the destination receives the source's values as they are)
DATA_TYPE_OF_KIND = {"timestamp": "timestamp", "date": "date", "epoch_s": "integer",
                     "epoch_ms": "integer", "epoch_us": "integer", "text": "string"}
#: ISO-8601 with microseconds and the UTC offset, as the cursor seed's example
DEFAULT_DATETIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%f%z"

_EPOCH_UNIT_US = {"epoch_s": 1_000_000, "epoch_ms": 1_000, "epoch_us": 1}
_FIELDS = ("%Y", "%m", "%d", "%H", "%M", "%S", "%f")
_FIELD_GRAIN = {"%d": timedelta(days=1), "%H": timedelta(hours=1), "%M": timedelta(minutes=1),
                "%S": timedelta(seconds=1), "%f": timedelta(microseconds=1)}
_JAVA = {"%Y": "yyyy", "%m": "MM", "%d": "dd", "%H": "HH", "%M": "mm", "%S": "ss", "%f": "SSSSSS",
         "%z": "Z"}
_TOKEN = re.compile(r"%.|[^%]+", re.DOTALL)


def _tokens(fmt: str) -> list[str]:
    return _TOKEN.findall(fmt)


def format_problem(fmt: str) -> str | None:
    """Why ``fmt`` cannot be a text last-modified column's format, or ``None`` if it can."""
    tokens = _tokens(fmt)
    if "".join(tokens) != fmt:  # a lone '%' matches no token
        return "it ends with a lone '%'"
    codes = [t for t in tokens if t.startswith("%") and t != "%%"]
    unknown = [c for c in codes if c not in _JAVA]
    if unknown:
        return (f"it uses {', '.join(unknown)}; a last-modified text can use {', '.join(_JAVA)} "
                "(and literal text)")
    if "%z" in codes and codes[-1] != "%z":
        return "%z must be the last field"
    fields = [c for c in codes if c != "%z"]
    if fields != list(_FIELDS[:len(fields)]) or len(fields) < 3:
        return ("its fields do not run from the year down (%Y, %m, %d, then optionally %H, %M, "
                "%S, %f, each once and in that order), so the values would not sort in time "
                "order as text and a range read on the column would skip rows")
    if any(ch.isdigit() for t in tokens if not t.startswith("%") for ch in t):
        return "literal digits between the fields would be read as part of a value"
    return None


@dataclass(frozen=True)
class LastModified:
    """The kind of a model's last-modified column and how instants map to its values."""

    kind: str = "timestamp"
    datetime_format: str | None = None  # text only

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown last_modified_format {self.kind!r}; allowed: {', '.join(KINDS)}")
        if self.kind == "text":
            problem = format_problem(self.fmt)
            if problem:
                raise ValueError(f"datetime_format {self.fmt!r}: {problem}")

    @property
    def fmt(self) -> str:
        return self.datetime_format or DEFAULT_DATETIME_FORMAT

    @property
    def grain(self) -> timedelta:
        """The smallest step between two values."""
        if self.kind == "date":
            return timedelta(days=1)
        if self.kind in _EPOCH_UNIT_US:
            return timedelta(microseconds=_EPOCH_UNIT_US[self.kind])
        if self.kind == "text":
            fields = [t for t in _tokens(self.fmt) if t in _FIELD_GRAIN]
            return _FIELD_GRAIN[fields[-1]]
        return timedelta(microseconds=1)

    def lookback_seconds(self, configured: int) -> int:
        """The lookback a read needs: the configured one, and at least one grain."""
        return max(configured, int(self.grain.total_seconds()))  # grains of a second or more are whole

    def ceil(self, moment: datetime) -> datetime:
        """The first instant on the grain at or after ``moment``."""
        step = to_epoch_us(EPOCH + self.grain)
        us = to_epoch_us(moment)
        return from_epoch_us(-(-us // step) * step)

    def value(self, moment: datetime) -> object:
        """The column value of an instant *on the grain* (as a driver or Spark takes it)."""
        moment = utc(moment)
        if self.kind == "timestamp":
            return moment
        if self.kind == "date":
            return moment.date()
        if self.kind in _EPOCH_UNIT_US:
            return to_epoch_us(moment) // _EPOCH_UNIT_US[self.kind]
        return moment.strftime(self.fmt)

    def bound(self, moment: datetime) -> object:
        """The value ``b`` such that a column value ``v`` is at or after ``moment`` exactly when
        ``v >= b`` (and before it exactly when ``v < b``)."""
        return self.value(self.ceil(moment))

    def moment(self, value: object) -> datetime:
        """The instant a column value stands for (to record the greatest value delivered)."""
        if self.kind == "timestamp":
            return utc(value)  # type: ignore[arg-type]
        if self.kind == "date":
            day = value.date() if isinstance(value, datetime) else value
            return datetime(day.year, day.month, day.day, tzinfo=UTC)  # type: ignore[union-attr]
        if self.kind in _EPOCH_UNIT_US:
            return from_epoch_us(int(value) * _EPOCH_UNIT_US[self.kind])  # type: ignore[call-overload]
        return utc(datetime.strptime(str(value), self.fmt))  # noqa: DTZ007 - zone-less text is UTC

    def java_pattern(self) -> str:
        """``datetime_format`` as a Spark (Java DateTimeFormatter) pattern."""
        parts = []
        for token in _tokens(self.fmt):
            if token == "%%":
                parts.append("'%'")
            elif token.startswith("%"):
                parts.append(_JAVA[token])
            else:
                parts.append("'" + token.replace("'", "''") + "'")
        return "".join(parts)
