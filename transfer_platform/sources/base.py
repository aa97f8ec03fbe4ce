"""What every source reader does, the choice of reader by vendor, and the checks they share."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.types import TYPES
from transfer_platform.core.windows import ReadBounds
from transfer_platform.errors import DataError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


@dataclass(frozen=True)
class ReadRequest:
    model: ModelConfig
    tenant_id: str
    bounds: ReadBounds
    destination: str = "(unknown destination)"  # named in read errors


class SourceReader(Protocol):
    def check(self, destination: str | None = None) -> None:
        """Raise ``ConnectionFailure`` naming host and port (and the destination, when given)
        if the source cannot be reached."""

    def read(self, spark: SparkSession, request: ReadRequest) -> DataFrame:
        """Rows of ``request.model`` for one tenant with ``lower <= last_modified < upper``
        (and rows whose last-modified value is NULL, so that they are refused, not lost), with
        the model's destination column names and types."""


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


def to_model_columns(frame: DataFrame, model: ModelConfig) -> DataFrame:
    """Select the model's columns from a frame of source names, renamed and cast.

    One ``selectExpr`` of SQL text: the Column API costs three JVM round trips per column, a
    noticeable part of a small window's time."""
    return frame.selectExpr(*[
        f"CAST({quoted_name(c.name_in_source)} AS {TYPES[c.data_type].spark}) AS {quoted_name(c.destination_name)}"
        for c in model.columns
    ])


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
                     available: Sequence[str]) -> DataError:
    """The error for a source_query (or table) that lacks columns the model names."""
    model = request.model
    what = "source_query" if model.source_query else f"source_table {model.source_table!r}"
    return DataError(
        f"the {what} of source '{source_name}' does not return the column(s) "
        f"{', '.join(missing)} named by the model; it returns: {', '.join(available) or '(nothing)'}",
        model=model.model_name, destination=request.destination,
        fix="make it return every column named in the model's columns (name_in_source) and its "
            "organization_column, renaming with AS where the names differ (SELECT lm AS "
            "updated_at ...), or correct name_in_source in the model",
    )


def reader_for(source) -> SourceReader:  # noqa: ANN001 - any configured source
    if source.vendor == "postgres":
        from transfer_platform.sources.jdbc import PostgresReader

        return PostgresReader(source)
    if source.vendor == "mysql":
        from transfer_platform.sources.jdbc import MysqlReader

        return MysqlReader(source)
    if source.vendor == "parquet":
        from transfer_platform.sources.parquet_lake import ParquetLakeReader

        return ParquetLakeReader(source)
    from transfer_platform.errors import ConfigError

    raise ConfigError(f"source {source.name!r}: vendor {source.vendor!r} is not supported yet "
                      "(supported: postgres, mysql, parquet)")
