"""PostgreSQL sources through Spark's JDBC reader.

The tenant filter and the change-detection bounds are written into the query Spark sends, so
PostgreSQL applies them (and can use an index on the last-modified column). The tenant id is an
escaped literal. With ``max_concurrent_queries_per_transfer > 1`` the read is split on the
last-modified column between the window's bounds: no ``min()/max()`` query is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.config.models import PostgresSource
from transfer_platform.connections import (
    connect_postgres,
    jdbc_properties,
    postgres_jdbc_url,
    spark_error_reason,
)
from transfer_platform.core.sql import (
    change_predicate,
    qualified,
    source_select,
    tenant_predicate,
    wrap_source_query,
)
from transfer_platform.errors import DataError
from transfer_platform.sources.base import ReadRequest, to_model_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FETCH_SIZE = 10_000


class PostgresReader:
    def __init__(self, source: PostgresSource) -> None:
        self.source = source
        self.what = f"PostgreSQL source '{source.name}'"

    def check(self) -> None:
        with connect_postgres(self.source.connection, what=self.what) as conn:
            conn.execute("SELECT 1")

    def query_for(self, request: ReadRequest) -> str:
        model = request.model
        if model.source_query:
            relation = wrap_source_query(model.source_query)
        else:
            relation = qualified(*model.source_table.split("."))
        predicates = [
            change_predicate(model.last_modified.name_in_source, request.bounds.lower, request.bounds.upper)
        ]
        if self.source.tenancy == "multi_tenant":
            predicates.insert(0, tenant_predicate(model.organization_column, request.tenant_id))
        return source_select(relation, [c.name_in_source for c in model.columns], predicates)

    def read(self, spark: SparkSession, request: ReadRequest) -> DataFrame:
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        connection = self.source.connection
        options = {
            "url": postgres_jdbc_url(connection),
            "driver": "org.postgresql.Driver",
            "dbtable": f"({self.query_for(request)}) AS tp_batch",
            "fetchsize": str(FETCH_SIZE),
            "sessionInitStatement": "SET TIME ZONE 'UTC'",
            **jdbc_properties(connection, f"sources.{self.source.name}.connection.password"),
        }
        parallel = self.source.max_concurrent_queries_per_transfer
        bounds = request.bounds
        if parallel > 1:
            options.update({
                "partitionColumn": request.model.last_modified.name_in_source,
                "lowerBound": bounds.lower.strftime("%Y-%m-%d %H:%M:%S.%f"),
                "upperBound": bounds.upper.strftime("%Y-%m-%d %H:%M:%S.%f"),
                "numPartitions": str(parallel),
            })
        try:
            frame = spark.read.format("jdbc").options(**options).load()
            return to_model_columns(frame, request.model)
        except (Py4JJavaError, PySparkException) as exc:
            raise DataError(
                f"reading source '{self.source.name}' failed: {spark_error_reason(exc)}",
                model=request.model.model_name, destination=request.destination,
                fix="check that source_table/source_query returns every column named in the model's "
                    "columns (name_in_source) and the organization column",
            ) from None
