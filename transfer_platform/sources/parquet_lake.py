"""A Parquet "lake" on local disk (or a mounted bucket), the way an Athena/S3 source looks.

Each ``source_table`` is a folder of Parquet files. The same predicates as for a database are
applied as Spark filters, which Spark pushes into the Parquet scan (row-group statistics).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.config.models import ParquetSource
from transfer_platform.errors import ConfigError, ConnectionFailure, Problem
from transfer_platform.sources.base import ReadRequest, to_model_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class ParquetLakeReader:
    def __init__(self, source: ParquetSource) -> None:
        self.source = source

    def check(self) -> None:
        if not self.source.connection.path.is_dir():
            raise ConnectionFailure(
                f"Parquet source '{self.source.name}' (folder {self.source.connection.path})",
                reason="the folder does not exist",
                fix="create the lake or correct connection.path (relative paths start at the "
                    "configuration file's folder)",
            )

    def read(self, spark: SparkSession, request: ReadRequest) -> DataFrame:
        from pyspark.sql import functions as F

        model = request.model
        if model.source_query:
            raise ConfigError([Problem(f"models.{model.model_name}.source_query",
                                       "source_query is not supported for Parquet sources yet",
                                       "use source_table: the folder name of the table in the lake")])
        table_path = self.source.connection.path / model.source_table
        if not table_path.is_dir():
            raise ConnectionFailure(
                f"table folder {table_path} of Parquet source '{self.source.name}'",
                reason="it does not exist", fix="check the model's source_table",
            )
        frame = spark.read.parquet(str(table_path))
        lm = F.col(f"`{model.last_modified.name_in_source}`")
        bounds = request.bounds
        in_window = (lm >= F.lit(bounds.lower)) & (lm < F.lit(bounds.upper))
        frame = frame.where(in_window | lm.isNull())
        if self.source.tenancy == "multi_tenant":
            frame = frame.where(F.col(f"`{model.organization_column}`") == F.lit(request.tenant_id))
        return to_model_columns(frame, model)
