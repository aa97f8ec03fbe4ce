"""What every source reader does, the choice of reader by vendor, and the checks they share."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Protocol

from transfer_platform.config.models import ColumnConfig, ModelConfig
from transfer_platform.core.last_modified import DATA_TYPE_OF_KIND
from transfer_platform.core.routes import Route
from transfer_platform.core.types import TYPES
from transfer_platform.core.windows import ReadBounds
from transfer_platform.errors import ConfigError, ConnectionFailure, Problem

if TYPE_CHECKING:
    from datetime import datetime

    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

    from transfer_platform.probes import Check
    from transfer_platform.sources.relay import RelayRead


@dataclass(frozen=True)
class ReadRequest:
    model: ModelConfig
    tenant_id: str
    bounds: ReadBounds
    destination: str = "(unknown destination)"  # named in read errors


class SourceReader(Protocol):
    """What every source reader does; a reader class derives from it for the defaults of a
    source read by Spark alone (no driver route, no connection that stalls, no catalog)."""

    #: whether :meth:`window_rows` costs no Spark job (a database's ``COUNT``); else neighbouring
    #: windows are first read together up to a bound, and counted only if that bound is passed
    counts_without_spark: bool
    #: the ways it reads a window (``transfer_platform/core/routes.py``): :attr:`Route.SPARK`
    #: always; :attr:`Route.DRIVER` and :attr:`Route.COPY_RELAY` through :meth:`driver_reads`
    routes: frozenset[Route] = frozenset({Route.SPARK})

    def driver_reads(self, request: ReadRequest) -> DriverReads | None:
        """The model's windows read by the database's own driver (:attr:`Route.DRIVER`), proven
        for ``request``'s model (its columns read as they are, asked with no row); ``None`` if
        the reader offers no such route (the default) or the model needs Spark's conversions."""
        return None

    def stall_of(self, exc: BaseException) -> ConnectionFailure | None:
        """The error of a source that stopped answering, if ``exc`` (a failed read) is its read
        timeout or the source, asked, does not answer in time; ``None`` for a source not read
        over a connection (the default: a lake, staged rows)."""
        return None

    def check(self, destination: str | None = None) -> None:
        """Raise ``ConnectionFailure`` naming host and port (and the destination, when given)
        if the source cannot be reached."""

    def check_read(self, spark: SparkSession, request: ReadRequest) -> None:
        """Prove that the model's read works on the source as it is now, before a transfer
        changes anything in a destination: every column the model names (and the organization
        column) is there, the last-modified column is of the configured kind, and each column's
        source type can be read as its ``data_type`` (Spark's own cast rules). Found from the
        source's columns and types alone (a query that returns no row, the Parquet files'
        footers): no row is read. Raises ``ConfigError`` naming the model, the column, what the
        source has, and the fix."""

    def read(self, spark: SparkSession, request: ReadRequest, *, with_origin: bool = False) -> DataFrame:
        """Rows of ``request.model`` for one tenant with ``lower <= last_modified < upper``
        (and rows whose last-modified value is NULL, so that they are refused, not lost), with
        the model's destination column names and types. ``with_origin``: and, where the source
        knows it (a lake's table: the file), where each row was read from, in
        ``ORIGIN_COLUMN``, to name the files of two conflicting versions of a row
        (``transfer_platform/transfers/versions.py``)."""

    def window_rows(self, spark: SparkSession, requests: list[ReadRequest], up_to: int) -> list[int] | None:
        """For each of ``requests`` (windows of one model and tenant, in order), how many rows it
        may read, counted up to ``up_to`` (``up_to`` means "that many or more"), found in one query
        for them all (never a Spark job per window). Never fewer than the read returns: ``0`` only
        for a window that holds no row (it is not read). ``None`` when it cannot tell (each
        window is then read on its own)."""

    def read_together(self, spark: SparkSession, requests: list[ReadRequest]) -> DataFrame:
        """The rows of each of ``requests`` (neighbouring windows of one model and tenant), as
        :meth:`read` returns them, in one frame (one Spark job), which :meth:`tagged` turns,
        once in this process as Arrow, into each row with the index of its window in
        ``WINDOW_COLUMN`` (a row in two windows' bounds, their lookback, comes twice), and
        its origin where :meth:`read` ``with_origin`` has one."""

    def tagged(self, table: pa.Table, requests: list[ReadRequest]) -> pa.Table:
        """What :meth:`read_together`'s frame brought into this process (``requests`` the same),
        as the model's columns and ``WINDOW_COLUMN`` (and ``ORIGIN_COLUMN``, if it came); by
        default the table as it came (each window's read tagged its rows)."""
        return table

    def keys_unique(self, request: ReadRequest) -> bool:
        """Whether the source itself keeps the model's primary key unique (a database's unique
        index on the table): one version per key then costs a window that Spark stages nothing.
        ``False`` when it cannot tell (the default: a lake is append-only, each version of a row in
        a file of its own; staged rows are resolved in each window)."""
        return False

    def count(self, spark: SparkSession, request: ReadRequest) -> int:
        """How many rows :meth:`read` would return for ``request``, counted where the rows are
        (a ``COUNT`` run by the database, or the Parquet scan with the read's filters) without
        moving them."""

    def probe(self, models: list[ModelConfig], tenants: dict[str, list[str]], target: str) -> list[Check]:
        """``test-connection``: reach, log in, then each model's read as a transfer sends it (for
        the tenants in ``tenants``, by model), returning no row and changing nothing; one
        :class:`Check` per step, a failure with its grant or setting."""


class StreamFailed(Exception):
    """The source failed while :meth:`DriverReads.copy_out` streamed a window (the window is then
    read as any other)."""



class TenantsReader(SourceReader, Protocol):
    """A source that stages reads (its configuration's ``staging``): every due tenant's rows of a
    model in one query, which source staging (``sources/shared_reads.py``) splits by tenant."""

    def read_tenants(self, spark: SparkSession, model: ModelConfig, tenants: list[str], lower: datetime,
                     upper: datetime, destination: str) -> DataFrame:
        """The rows of ``model`` of every tenant in ``tenants`` with ``lower <= last_modified <
        upper`` (and NULL last-modified values), as the source names and types them."""
        ...

class DriverReads(Protocol):
    """One model's windows read by the source database's driver, on one connection held for the
    model's transfer (:attr:`Route.DRIVER`; :attr:`Route.COPY_RELAY` through :meth:`copy_out`
    and :meth:`relay`, for a reader that offers it)."""

    counts_without_spark: bool

    def close(self) -> None:
        """Close the connection to the source (opened again if asked for more)."""

    def keys_unique(self, request: ReadRequest) -> bool:
        """:meth:`SourceReader.keys_unique` on the held connection."""

    def window_rows(self, spark: object, requests: list[ReadRequest], up_to: int) -> list[int] | None:
        """:meth:`SourceReader.window_rows` on the held connection (``spark`` is not used)."""

    def read_together(self, requests: list[ReadRequest], schema: pa.Schema, up_to: int | None = None) -> pa.Table:
        """The rows of each of ``requests`` as the model's columns (``schema``) and
        ``WINDOW_COLUMN``, as Spark's read of them brings them; at most ``up_to + 1`` rows."""

    def copy_out(self, request: ReadRequest, types: dict[str, str]) -> Iterator[bytes]:
        """``request``'s window as a binary COPY stream, each column cast to the type ``types``
        names for it in the destination; a failure of the source raised as :class:`StreamFailed`."""

    def relay(self, request: ReadRequest, slices: int) -> RelayRead:
        """``request``'s window relayed in ``slices`` slices by Spark's tasks (``sources/relay.py``)."""


def analyzed(frame: DataFrame) -> DataFrame:
    """``frame``, its plan analyzed now: a Spark Connect client builds a DataFrame without asking
    the server, so a missing table or column, or a refused read, surfaces here (where the reader
    names it), as a local Spark's does when the DataFrame is made."""
    _ = frame.schema
    return frame


def for_destination(destination: str | None) -> str:
    """`` (reading for destination 'x')`` to add to a message, or nothing."""
    return f" (reading for destination '{destination}')" if destination else ""


def quoted_name(name: str) -> str:
    """A column name as a Spark SQL identifier (dots, spaces and backticks in it are not syntax)."""
    return "`" + name.replace("`", "``") + "`"


def spark_col(name: str) -> Column:
    """A column by its exact name (dots, spaces and backticks in it are not syntax)."""
    from pyspark.sql import functions as F

    return F.col(quoted_name(name))


#: the column that tags each row of windows read together with its window's index
WINDOW_COLUMN = "__tp_window"
#: where a row was read from (a lake's file: see ``SourceReader.read``'s ``with_origin``)
ORIGIN_COLUMN = "__tp_origin"


def in_bounds_tags(table: pa.Table, column: str, requests: list[ReadRequest]) -> pa.Table:
    """``table``'s rows tagged with each window (of ``requests``) whose read bounds hold the
    value in ``column`` (``lower <= value < upper``, compared in the column's own type: the
    bounds as the last-modified kind writes them, then cast to it), in ``WINDOW_COLUMN``; a row
    in two windows' bounds comes twice; a NULL value goes to the first window (which refuses
    it). ``column`` itself is dropped."""
    import pyarrow as pa  # at run time too
    import pyarrow.compute as pc

    values = table.column(column)
    kind = requests[0].model.change_column

    def bound(moment: datetime) -> pa.Scalar:
        return pa.scalar(kind.bound(moment)).cast(values.type)

    rows, tags = [], []
    for i, request in enumerate(requests):
        inside = pc.and_(pc.greater_equal(values, bound(request.bounds.lower)),
                         pc.less(values, bound(request.bounds.upper)))
        if i == 0:
            inside = pc.or_kleene(inside, pc.is_null(values))
        found = pc.indices_nonzero(pc.fill_null(inside, False))
        rows.append(found)
        tags.append(pa.array([i] * len(found), pa.int32()))
    return (table.drop_columns([column]).take(pa.concat_arrays(rows))
            .append_column(WINDOW_COLUMN, pa.concat_arrays(tags)))


def to_model_columns(frame: DataFrame, model: ModelConfig, keep: tuple[str, ...] = ()) -> DataFrame:
    """Select the model's columns from a frame of source names, renamed and cast (and the
    columns named in ``keep``, as they are).

    One ``selectExpr`` of SQL text: the Column API costs three JVM round trips per column, a
    noticeable part of a small window's time. A text last-modified column is checked on the way:
    a value that is not exactly what its ``datetime_format`` writes for a UTC instant (it would
    not compare in time order) stops the read with the key, the value and the format."""
    text_last_modified = model.change_column.kind == "text"

    def select(c: ColumnConfig) -> str:
        cast = f"CAST({quoted_name(c.name_in_source)} AS {TYPES[c.data_type].spark})"
        if c.is_last_modified and text_last_modified:
            cast = _checked_text(model, cast)
        return f"{cast} AS {quoted_name(c.destination_name)}"

    return frame.selectExpr(*[select(c) for c in model.columns], *[quoted_name(name) for name in keep])


def model_columns(frame: DataFrame, request: ReadRequest, source_name: str, *, keep: tuple[str, ...] = (),
                  analyze: bool = False) -> DataFrame:
    """:func:`to_model_columns` of a reader's frame (``analyze``: its plan analyzed now, as
    :func:`analyzed`), a column whose source type Spark cannot cast to its ``data_type`` refused
    by name (:func:`cast_mismatch`) instead of as Spark's analysis error."""
    from pyspark.errors import AnalysisException

    with _quiet_analysis():
        try:
            selected = to_model_columns(frame, request.model, keep)
            return analyzed(selected) if analyze else selected
        except AnalysisException:
            mismatch = cast_mismatch(frame, request, source_name)
            if mismatch is None:
                raise
            raise mismatch from None


@contextmanager
def _quiet_analysis() -> Iterator[None]:
    """PySpark logs each analysis error it raises, with the Java stack, on its
    ``SQLQueryContextLogger``; a cast refused here becomes a one-line ``ConfigError`` (or is
    raised again), so that log is dropped meanwhile, in this thread only (transfers of several
    destinations run in threads)."""
    _quiet_filter()
    was = getattr(_QUIET, "on", False)
    _QUIET.on = True
    try:
        yield
    finally:
        _QUIET.on = was


_QUIET = threading.local()


class _DropWhileQuiet(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_QUIET, "on", False)


@cache
def _quiet_filter() -> None:
    """Put :class:`_DropWhileQuiet` on PySpark's logger, once (its own logger class: a plain
    logger of that name would break PySpark's structured calls)."""
    from pyspark.logger import PySparkLogger

    PySparkLogger.getLogger("SQLQueryContextLogger").addFilter(_DropWhileQuiet())


def cast_mismatch(frame: DataFrame, request: ReadRequest, source_name: str) -> ConfigError | None:
    """The error for the first model column whose source type (in ``frame``, of source names)
    Spark cannot cast to the column's ``data_type``, listing the data types it can be read as;
    ``None`` if every column can be cast. Asks Spark's analyzer, one cast at a time (no row is
    read): the failure path only."""
    from pyspark.errors import AnalysisException

    def castable(source: str, data_type: str) -> bool:
        try:
            analyzed(frame.selectExpr(f"CAST({quoted_name(source)} AS {TYPES[data_type].spark})"))
        except AnalysisException:
            return False
        return True

    model = request.model
    for column in model.columns:
        if castable(column.name_in_source, column.data_type):
            continue
        found = next((f.dataType.simpleString() for f in frame.schema.fields
                      if f.name.casefold() == column.name_in_source.casefold()), "an unknown type")
        readable = [t for t in TYPES if castable(column.name_in_source, t)]
        return ConfigError([Problem(
            _where(request),
            f"column {column.name_in_source!r} is {found} in the {_relation(model)} of source "
            f"'{source_name}', which cannot be read as data_type {column.data_type}",
            f"give it a data_type that {found} can be read as ({', '.join(readable) or 'none'}), "
            "or convert it in a source_query (CAST(... AS ...) AS " + column.name_in_source + ")",
        )])
    return None


def _where(request: ReadRequest) -> str:
    """Where a model's problem is, for a ``ConfigError`` raised while reading."""
    return f"model '{request.model.model_name}' -> destination '{request.destination}'"


def _relation(model: ModelConfig) -> str:
    return "source_query" if model.source_query else f"source_table {model.source_table!r}"


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _checked_text(model: ModelConfig, value: str) -> str:
    kind = model.change_column
    pattern = _sql_string(kind.java_pattern())
    keys = ", ".join(f"'{c.destination_name}=', CAST({quoted_name(c.name_in_source)} AS string)"
                     for c in model.primary_key)
    message = (f"concat('the last-modified value \\'', {value}, '\\' at key ', {keys}, ' is not what "
               f"datetime_format ', {_sql_string(repr(kind.fmt))}, ' writes for a UTC time (text is "
               f"compared as text: fix the value, or the format)')")
    return (f"CASE WHEN {value} IS NULL OR date_format(try_to_timestamp({value}, {pattern}), "
            f"{pattern}) = {value} THEN {value} ELSE raise_error({message}) END")


#: the Spark types of each kind of last-modified column, and what to write for the others
_SPARK_KINDS = {"TimestampType": "timestamp", "TimestampNTZType": "timestamp", "DateType": "date",
                "LongType": "integer", "IntegerType": "integer", "ShortType": "integer",
                "ByteType": "integer", "StringType": "string", "VarcharType": "string",
                "CharType": "string"}
_WRITE = {"timestamp": "data_type: timestamp",
          "date": "data_type: date",
          "integer": "data_type: integer and last_modified_format: epoch_s, epoch_ms or epoch_us "
                     "(the unit its values count)",
          "string": "data_type: string, and datetime_format: <its strftime format> unless it is "
                    "ISO-8601 as %Y-%m-%dT%H:%M:%S.%f%z writes it"}


def check_last_modified_type(frame: DataFrame, request: ReadRequest, source_name: str) -> None:
    """Refuse a last-modified column whose type in the source is not the configured kind (a
    ``date`` or an epoch integer declared ``timestamp``, or the reverse): comparing it with the
    wrong kind of bound would read the wrong rows. Says what was found and what to write."""
    model = request.model
    column = model.last_modified
    field = next((f for f in frame.schema.fields
                  if f.name.casefold() == column.name_in_source.casefold()), None)
    if field is None:
        return  # a missing column is reported by the caller, with the columns that exist
    type_name = type(field.dataType).__name__
    found = _SPARK_KINDS.get(type_name)
    if type_name == "DecimalType" and field.dataType.scale == 0:
        found = "integer"
    expected = DATA_TYPE_OF_KIND[model.change_column.kind]
    if found == expected:
        return
    raise ConfigError([Problem(
        _where(request),
        f"the last-modified column {column.name_in_source!r} of source '{source_name}' is "
        f"{field.dataType.simpleString()} there, but the model reads it as "
        f"{model.change_column.kind} (data_type {column.data_type})",
        f"write {_WRITE[found]} on that column in the model" if found else
        "use a column that holds timestamps, dates, epoch integers or formatted text, or "
        "convert it in a source_query",
    )])


def required_columns(model: ModelConfig, *, multi_tenant: bool) -> list[str]:
    """The source columns a read needs: the model's, then the organization column if it filters."""
    names = [c.name_in_source for c in model.columns]
    if multi_tenant and model.organization_column and model.organization_column not in names:
        names.append(model.organization_column)
    return names


def missing_columns(required: Sequence[str], available: Iterable[str], *,
                    case_sensitive: bool) -> list[str]:
    """The required names that ``available`` lacks (compared as the database compares them)."""
    def key(name: str) -> str:
        return name if case_sensitive else name.casefold()

    have = {key(name) for name in available}
    return [name for name in required if key(name) not in have]


def columns_mismatch(request: ReadRequest, source_name: str, missing: Sequence[str],
                     available: Sequence[str]) -> ConfigError:
    """The error for a source_query (or table) that lacks columns the model names."""
    model = request.model
    return ConfigError([Problem(
        _where(request),
        f"the {_relation(model)} of source '{source_name}' does not return the column(s) "
        f"{', '.join(missing)} named by the model; it returns: {', '.join(available) or '(nothing)'}",
        "correct name_in_source in the model's columns (or its organization_column), or make the "
        "source return every column they name, renaming with AS where the names differ (SELECT "
        "lm AS updated_at ...)",
    )])


def reader_for(source) -> SourceReader:  # any configured source
    """The reader of a configured source, by its vendor (``transfer_platform/vendors/``)."""
    from transfer_platform.vendors import SOURCES, implementation

    return implementation(SOURCES, "source", source)
