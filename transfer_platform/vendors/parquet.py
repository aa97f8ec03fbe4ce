"""A Parquet "lake" source (a folder or an S3 bucket): its configuration and its record."""

from __future__ import annotations

from typing import Literal

from transfer_platform.config.connection_settings import FolderOrBucket
from transfer_platform.config.entries import SourceBase
from transfer_platform.vendors.record import Vendor, one_query


class ParquetSource(SourceBase):
    """A Parquet "lake" in a folder or an S3 bucket: one folder of Parquet files per ``source_table``."""

    vendor: Literal["parquet"]
    connection: FolderOrBucket


def _folder_name(tenant_id: str, uses_source_query: bool) -> str | None:
    if tenant_id in (".", "..") or "/" in tenant_id:
        return "it must be a single folder name (no '/', not '.' or '..')"
    return None


SOURCE = Vendor("parquet", "source", "transfer_platform.sources.parquet_lake", "ParquetLakeReader", ParquetSource,
                drivers=("pyarrow", "pyarrow.dataset"),
                refuses=(one_query("source", "Spark reads the lake's files in parallel by itself (one task "
                                             "per file split), no query is split"),),
                default_lookback_seconds=300, tenant_container="folder", tenant_id_rule=_folder_name)
