"""What every source reader does, and the choice of reader by vendor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.types import TYPES
from transfer_platform.core.windows import ReadBounds

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class ReadRequest:
    model: ModelConfig
    tenant_id: str
    bounds: ReadBounds
    destination: str = "(unknown destination)"  # named in read errors


class SourceReader(Protocol):
    def check(self) -> None:
        """Raise ``ConnectionFailure`` naming host and port if the source cannot be reached."""

    def read(self, spark: SparkSession, request: ReadRequest) -> DataFrame:
        """Rows of ``request.model`` for one tenant with ``lower <= last_modified < upper``
        (and rows whose last-modified value is NULL, so that they are refused, not lost), with
        the model's destination column names and types."""


def to_model_columns(frame: DataFrame, model: ModelConfig) -> DataFrame:
    """Select the model's columns from a frame of source names, renamed and cast."""
    from pyspark.sql import functions as F

    return frame.select(
        *[F.col(f"`{c.name_in_source}`").cast(TYPES[c.data_type].spark).alias(c.destination_name)
          for c in model.columns]
    )


def reader_for(source) -> SourceReader:  # noqa: ANN001 - any configured source
    if source.vendor == "postgres":
        from transfer_platform.sources.jdbc import PostgresReader

        return PostgresReader(source)
    if source.vendor == "parquet":
        from transfer_platform.sources.parquet_lake import ParquetLakeReader

        return ParquetLakeReader(source)
    from transfer_platform.errors import ConfigError

    raise ConfigError(f"source {source.name!r}: vendor {source.vendor!r} is not supported yet "
                      "(supported: postgres, parquet)")
