"""A Parquet "lake" in a folder or an S3 bucket, the way an Athena/S3 source looks.

Layout, under ``connection.path`` (or ``connection.bucket`` and ``prefix``: :class:`S3Lake`):

- ``multi_tenant``: ``<path>/<table>/`` holds a table's Parquet files, every tenant's rows in
  them, told apart by the model's ``organization_column``;
- ``schema_tenanted``: ``<path>/<tenant id>/<table>/`` holds one tenant's rows (the folder is the
  recipient's ``id_in_provider_system``, which must therefore be a single folder name).

``source_table`` names a table folder. A ``source_query`` is Spark SQL over the lake: each table
folder the query mentions (the tenant's folders, for a schema-tenanted lake) is a temporary view
named after the folder, registered in a separate Spark session so that no view leaks into the
caller's. Either way the same predicates as for a database (tenant, then
``(lm >= lower AND lm < upper) OR lm IS NULL``) apply outside, as Spark filters, which Spark
pushes into the Parquet scan (row-group statistics).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path, PurePath, PurePosixPath
from typing import TYPE_CHECKING, TypeVar

from transfer_platform.config.connection_settings import PathConnection
from transfer_platform.config.models import ModelConfig
from transfer_platform.core.timeutil import EPOCH
from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.errors import ConfigError, ConnectionFailure, DataError, Problem
from transfer_platform.runtime.connections import spark_error_reason
from transfer_platform.sources.base import (
    ORIGIN_COLUMN,
    ReadRequest,
    SourceReader,
    check_last_modified_type,
    columns_mismatch,
    for_destination,
    in_bounds_tags,
    missing_columns,
    model_columns,
    required_columns,
    spark_col,
)
from transfer_platform.vendors.parquet import ParquetSource

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

    from transfer_platform.probes import Check, Probe

T = TypeVar("T")
_GLOB_CHARACTERS = frozenset("\\*?[]{}")


class ParquetLakeReader(SourceReader):
    counts_without_spark = False  # window_rows: a Spark job over the files

    def __init__(self, source: ParquetSource) -> None:
        self.source = source
        self.what = f"Parquet source '{source.name}'"
        self.lake = FolderLake(source.connection.path) if isinstance(source.connection, PathConnection) \
            else S3Lake(source)

    @property
    def multi_tenant(self) -> bool:
        return self.source.tenancy == "multi_tenant"

    def check(self, destination: str | None = None) -> None:
        if not self.lake.is_dir(self.lake.root):
            raise ConnectionFailure(
                f"{self.what} ({self.lake.describe(self.lake.root)}){for_destination(destination)}",
                reason="the folder does not exist",
                fix="create the lake or correct connection.path (relative paths start at the "
                    "configuration file's folder), or the bucket and prefix",
            )

    def probe(self, models: list[ModelConfig], tenants: dict[str, list[str]], target: str) -> list[Check]:
        """The lake's folder, then each model's table folder (each tenant's, for a schema-tenanted
        lake): there, readable, its Parquet files holding the model's columns (read by pyarrow
        from the files' footers: no Spark). A ``source_query``'s columns are checked when read."""
        from transfer_platform.probes import Probe, current_user, no_recipient

        probe = Probe(target)
        root = self.lake.root
        name = f"read {self.lake.describe(root)}"
        if not self.lake.readable(root):
            probe.failed(name, "it does not exist or cannot be listed", f"create the lake or correct "
                         f"connection.path (or the bucket and prefix), and let the user transfers run "
                         f"as ({current_user()}) read it (chmod -R a+rX; on S3 s3:ListBucket and "
                         "s3:GetObject)")
            return probe.checks
        probe.passed(name)
        for model in models:
            for tenant in no_recipient(tenants.get(model.model_name), self.multi_tenant)[: 1 if self.multi_tenant else None]:
                request = ReadRequest(model, tenant, None)  # type: ignore[arg-type]
                self._probe_table(probe, request)
        return probe.checks

    def _probe_table(self, probe: Probe, request: ReadRequest) -> None:

        model = request.model
        try:
            folder = self.tables_root(request) / (model.source_table or "")
        except ConfigError as exc:
            probe.failed(f"read model '{model.model_name}'", exc.problems[0].message, exc.problems[0].fix)
            return
        name = (f"read model '{model.model_name}' ({'tables under ' if model.source_query else ''}"
                f"{self.lake.describe(folder)})")
        if not self.lake.readable(folder):
            probe.failed(name, "the folder does not exist or cannot be listed", self._layout_fix())
            return
        if model.source_query:
            probe.passed(name, "the source_query's columns are checked when it runs")
            return
        try:
            columns = self.lake.dataset(folder).schema.names
        except (OSError, ValueError) as exc:
            probe.failed(name, str(exc).splitlines()[0], "make every file in the folder a readable Parquet file")
            return
        required = required_columns(model, multi_tenant=self.multi_tenant)
        missing = missing_columns(required, columns, case_sensitive=False)
        if missing:
            probe.failed(name, f"its files lack the column(s) {', '.join(missing)}; they have: "
                         f"{', '.join(columns) or '(none)'}", "correct name_in_source in the model's "
                         "columns, or its organization_column")
            return
        probe.passed(name)

    def _source_rows(self, spark: SparkSession, request: ReadRequest, *, rows: bool = True,
                     origin: bool = False) -> DataFrame:
        """The tenant's rows in the request's bounds (or with a NULL last-modified value), with
        the source's column names and types (``rows=False``: the same frame over no row, from the
        files' footers, for :meth:`check_read`; ``origin``: a table's rows with their file in
        ``ORIGIN_COLUMN``; a ``source_query``'s rows have none)."""
        from pyspark.sql import functions as F

        model = request.model
        frame = (self._query(spark, request, rows) if model.source_query
                 else self._table(spark, request, rows, origin))
        required = required_columns(model, multi_tenant=self.multi_tenant)
        missing = missing_columns(required, frame.columns, case_sensitive=False)
        if missing:
            raise columns_mismatch(request, self.source.name, missing, frame.columns)
        check_last_modified_type(frame, request, self.source.name)
        frame = frame.where(_in_bounds(model, request.bounds) | _last_modified(model).isNull())
        if self.multi_tenant:
            frame = frame.where(spark_col(model.organization_column) == F.lit(request.tenant_id))
        return frame

    def check_read(self, spark: SparkSession, request: ReadRequest) -> None:
        """The read's frame over no row (the table's or the query's columns and types, from the
        files' footers), its columns, last-modified kind and casts checked."""
        model_columns(self._source_rows(spark, request, rows=False), request, self.source.name, analyze=True)

    def read(self, spark: SparkSession, request: ReadRequest, *, with_origin: bool = False) -> DataFrame:
        frame = self._source_rows(spark, request, origin=with_origin)
        return model_columns(frame, request, self.source.name, keep=_origin_of(frame))

    def read_together(self, spark: SparkSession, requests: list[ReadRequest]) -> DataFrame:
        """One scan of the windows' whole range (not one per window: a scan lists the folder and
        reads the files' footers), each row with its last-modified value as the source holds it;
        :meth:`tagged` then finds each row's windows in this process. (Tagging them in Spark, a
        ``CASE`` per window, cost its optimizer and code generation about 2 CPU-seconds for 64
        windows, whatever the rows.)"""
        model = requests[0].model
        lower = min(r.bounds.lower for r in requests)
        upper = max(r.bounds.upper for r in requests)
        whole = replace(requests[0], bounds=ReadBounds(lower, upper, Window(lower, upper)))
        frame = self._source_rows(spark, whole, origin=True).withColumn(_SOURCE_LAST_MODIFIED, _last_modified(model))
        return model_columns(frame, whole, self.source.name, keep=(_SOURCE_LAST_MODIFIED, *_origin_of(frame)))

    def tagged(self, table: pa.Table, requests: list[ReadRequest]) -> pa.Table:
        """Each row with every window whose bounds hold its last-modified value (a row in a
        lookback comes twice); a NULL one goes to the first window, which refuses it."""
        return in_bounds_tags(table, _SOURCE_LAST_MODIFIED, requests)

    def window_rows(self, spark: SparkSession, requests: list[ReadRequest], up_to: int) -> list[int] | None:
        """How many rows each window may read, from one Spark job over their whole range: the
        tenant's rows counted per bucket (as long as the shortest window) of last-modified values;
        a window may read the rows of every bucket it overlaps (so never fewer than it reads).
        A timestamp column only (else ``None``)."""
        from pyspark.sql import functions as F

        if not requests or requests[0].model.change_column.kind != "timestamp":
            return None
        lower = min(r.bounds.lower for r in requests)
        upper = max(r.bounds.upper for r in requests)
        whole = replace(requests[0], bounds=ReadBounds(lower, upper, Window(lower, upper)))
        step_us = max(1, min(int((r.bounds.upper - r.bounds.lower) / MICROSECOND) for r in requests))
        lm = spark_col(requests[0].model.last_modified.destination_name)
        bucket = F.floor(F.unix_micros(lm) / F.lit(step_us))
        found = self._spark_step(whole, f"counting the rows of {self._what_is_read(whole)} by window",
                                 self.read(spark, whole).groupBy(bucket.alias("b")).count().collect)
        if any(row.b is None for row in found):  # a NULL last-modified value: every window reads (and refuses) it
            return None
        found = sorted((row.b, row["count"]) for row in found)
        buckets = [b for b, _ in found]

        def rows_of(request: ReadRequest) -> int:
            first = bisect.bisect_left(buckets, _micros(request.bounds.lower) // step_us)
            last = bisect.bisect_right(buckets, (_micros(request.bounds.upper) - 1) // step_us)
            return min(up_to, sum(n for _, n in found[first:last]))

        return [rows_of(r) for r in requests]

    def count(self, spark: SparkSession, request: ReadRequest) -> int:
        """The rows of :meth:`read`, counted by Spark (its filters are pushed into the Parquet
        scan, and the model's casts are not evaluated)."""
        frame = self.read(spark, request)
        return self._spark_step(request, f"counting the rows of {self._what_is_read(request)}", frame.count)

    def _what_is_read(self, request: ReadRequest) -> str:
        return "source_query" if request.model.source_query else f"table {request.model.source_table!r}"

    # -- where the tables are ---------------------------------------------------------------------

    def tables_root(self, request: ReadRequest) -> PurePath:
        """The folder whose sub-folders are the tables this tenant's read can see."""
        root = self.lake.root
        if self.multi_tenant:
            return root
        problem = self.source.vendor_record.tenant_id_problem(request.tenant_id, uses_source_query=False)
        if problem:
            container = self.source.vendor_record.tenant_container
            raise ConfigError([Problem(
                f"models.{request.model.model_name} (destination '{request.destination}')",
                f"tenant id {request.tenant_id!r} cannot name its {container} in schema-tenanted "
                f"{self.what}: {problem}",
                "give the recipient an id_in_provider_system that is a plain folder name")])
        return root / request.tenant_id

    def _missing_folder(self, folder: PurePath, request: ReadRequest, fix: str) -> ConnectionFailure:
        return ConnectionFailure(
            f"{self.lake.describe(folder)} of {self.what} (model '{request.model.model_name}', destination "
            f"'{request.destination}')", reason="it does not exist", fix=fix)

    def _table(self, spark: SparkSession, request: ReadRequest, rows: bool = True,
               origin: bool = False) -> DataFrame:
        folder = self.tables_root(request) / request.model.source_table
        if not self.lake.is_dir(folder):
            raise self._missing_folder(folder, request, self._layout_fix())
        return self._spark_step(request, f"reading {self.lake.describe(folder)}",
                                lambda: self.lake.frame(spark, folder, self._tenant_filter(request), rows=rows,
                                                        origin=origin))

    def _tenant_filter(self, request: ReadRequest) -> tuple[str, str] | None:
        """(column, tenant id) for a multi-tenant table: rows of other tenants need not be read."""
        return (request.model.organization_column, request.tenant_id) if self.multi_tenant else None

    def _query(self, spark: SparkSession, request: ReadRequest, rows: bool = True) -> DataFrame:
        root = self.tables_root(request)
        if not self.lake.is_dir(root):
            raise self._missing_folder(root, request, self._layout_fix())
        query = request.model.source_query
        session = spark.newSession()  # its own temporary views; same SparkContext and settings
        views = []
        for folder in mentioned_table_folders(self.lake.subfolders(root), query):
            self._spark_step(request, f"reading {self.lake.describe(folder)}",
                             lambda folder=folder: self.lake.frame(session, folder, None, rows=rows)
                             .createOrReplaceTempView(spark_view_name(folder.name)))
            views.append(folder.name)
        return self._spark_step(
            request, f"running source_query over the tables {', '.join(views) or '(none found)'} "
                     f"of {self.lake.describe(root)}", lambda: session.sql(query))

    def _spark_step(self, request: ReadRequest, doing: str, step: Callable[[], T]) -> T:
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        try:
            result = step()
            _ = getattr(result, "schema", None)  # a DataFrame's plan analyzed now (see base.analyzed)
            return result
        except (Py4JJavaError, PySparkException) as exc:
            raise DataError(
                f"{doing} ({self.what}) failed: {spark_error_reason(exc)}",
                model=request.model.model_name, destination=request.destination,
                fix=self._layout_fix() + "; a source_query is Spark SQL that names table folders "
                    "as tables",
            ) from None

    def _layout_fix(self) -> str:
        if self.multi_tenant:
            return "each source_table is a folder of Parquet files under connection.path"
        return ("a schema-tenanted lake keeps each recipient's tables under "
                "<connection.path>/<id_in_provider_system>/<table>")


class FolderLake:
    """A lake in a folder, read by Spark itself (its filters pushed into the Parquet scan)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def describe(self, folder: PurePath) -> str:
        return f"folder {folder}"

    def is_dir(self, folder: PurePath) -> bool:
        return Path(folder).is_dir()

    def readable(self, folder: PurePath) -> bool:
        try:
            next(iter(Path(folder).iterdir()), None)
        except OSError:
            return False
        return True

    def subfolders(self, folder: PurePath) -> list[PurePath]:
        return [p for p in Path(folder).iterdir() if p.is_dir()]

    def dataset(self, folder: PurePath):  # a pyarrow Dataset
        import pyarrow.dataset as pads

        return pads.dataset(folder, format="parquet")

    def frame(self, spark: SparkSession, folder: PurePath, tenant: tuple[str, str] | None, *,
              rows: bool = True, origin: bool = False) -> DataFrame:
        """The folder's rows (the caller filters; Spark pushes it down; ``rows`` makes no
        difference: no row is read until the frame runs); ``origin``: with each row's file
        (Spark's ``_metadata.file_path``, a ``file:`` URI) in ``ORIGIN_COLUMN``. Spark infers a folder's
        schema with a job of its own (a footer read; ~0.2 s warm): the schema it inferred is kept
        for as long as the folder holds the same files (names, sizes, modification times), so a
        model's reads after the first, and its next transfer if nothing was written, skip it."""
        path = literal_path(Path(folder))
        files = _listing(Path(folder))
        schema = _INFERRED.get((path, files))
        frame = (spark.read if schema is None else spark.read.schema(schema)).parquet(path)
        if schema is None:
            _INFERRED[(path, files)] = frame.schema
            while len(_INFERRED) > _INFERRED_MAX:
                _INFERRED.pop(next(iter(_INFERRED)))
        if origin:
            frame = frame.withColumn(ORIGIN_COLUMN, frame.metadataColumn("_metadata").getField("file_path"))
        return frame


#: schemas Spark inferred, by (folder, its files): see :meth:`FolderLake.frame`
_INFERRED: dict[tuple[str, tuple], object] = {}
_INFERRED_MAX = 256


def _listing(folder: Path) -> tuple:
    """Every file under ``folder``: (relative path, size, modification time in ns), sorted."""
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            stat = os.stat(os.path.join(root, name))
            found.append((os.path.relpath(os.path.join(root, name), folder), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(found))


class S3Lake:
    """A lake in an S3 bucket (under ``prefix``), read by pyarrow's S3 file system: Spark's own
    S3 connector (hadoop-aws) is not available. A table's files are scanned by Arrow, the tenant's
    rows only for a multi-tenant table, and handed to Spark as one Arrow table per read."""

    def __init__(self, source: ParquetSource) -> None:
        c = source.connection
        self.connection = c
        self.where = f"bucket {c.bucket} at {c.endpoint_url or f'AWS S3 ({c.region})'}"
        self.root = PurePosixPath(c.bucket, *[p for p in c.prefix.split("/") if p])
        self._source = source
        self._fs = None

    @property
    def fs(self):  # a pyarrow S3FileSystem, made at the first use
        if self._fs is None:
            from pyarrow import fs

            c = self.connection
            keys = c.credentials(f"source '{self._source.name}'", ("access_key", "secret_key"))
            self._fs = fs.S3FileSystem(region=c.region, endpoint_override=c.endpoint_url,
                                       force_virtual_addressing=not c.path_style and c.endpoint_url is None,
                                       connect_timeout=5, request_timeout=60, **keys)
        return self._fs

    def describe(self, folder: PurePath) -> str:
        key = "/".join(folder.parts[1:])
        return f"prefix {key or '/'} of {self.where}"

    def _list(self, folder: PurePath) -> list:
        from pyarrow import fs

        try:
            return self.fs.get_file_info(fs.FileSelector(str(folder), allow_not_found=True))
        except OSError as exc:
            raise ConnectionFailure(f"Parquet source '{self._source.name}' ({self.describe(folder)})",
                                    reason=str(exc).split(" (Request ID")[0],
                                    fix="check connection.bucket, prefix, endpoint_url, region and the "
                                        "keys (s3:ListBucket and s3:GetObject on the prefix)") from None

    def is_dir(self, folder: PurePath) -> bool:
        return bool(self._list(folder))

    def readable(self, folder: PurePath) -> bool:
        try:
            return self.is_dir(folder)
        except ConnectionFailure:
            return False

    def subfolders(self, folder: PurePath) -> list[PurePath]:
        from pyarrow import fs

        return [PurePosixPath(info.path) for info in self._list(folder) if info.type == fs.FileType.Directory]

    def dataset(self, folder: PurePath):  # a pyarrow Dataset
        import pyarrow.dataset as pads

        return pads.dataset(str(folder), filesystem=self.fs, format="parquet")

    def frame(self, spark: SparkSession, folder: PurePath, tenant: tuple[str, str] | None, *,
              rows: bool = True, origin: bool = False) -> DataFrame:
        """The table's rows (the tenant's), scanned here; ``rows=False``: none, with the
        columns and types of the files (the dataset's schema: a footer read); ``origin``: with
        each row's file (``s3://bucket/key``) in ``ORIGIN_COLUMN``."""
        import pyarrow.compute as pc
        import pyarrow.dataset as pads

        try:
            dataset = self.dataset(folder)
            if not rows:
                return spark.createDataFrame([], _spark_schema(dataset.schema))
            # "__filename": Arrow's name for a row's file (bucket/key), in a list of columns only
            columns = [*dataset.schema.names, "__filename"] if origin else None
            table = dataset.to_table(columns=columns,
                                     filter=None if tenant is None else pads.field(tenant[0]) == tenant[1])
            if origin:
                files = pc.binary_join_element_wise("s3://", table.column("__filename"), "")
                table = table.drop_columns(["__filename"]).append_column(ORIGIN_COLUMN, files)
        except OSError as exc:
            raise ConnectionFailure(f"Parquet source '{self._source.name}' ({self.describe(folder)})",
                                    reason=str(exc).split(" (Request ID")[0],
                                    fix="check the keys' s3:GetObject on the prefix") from None
        if not table.num_rows:  # Spark infers no schema from zero Arrow rows: give it the files'
            return spark.createDataFrame([], _spark_schema(table.schema))
        return spark.createDataFrame(table)


def _spark_schema(schema):  # pyarrow Schema -> Spark StructType
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def literal_path(folder: Path) -> str:
    """``folder`` for Spark, which reads paths as Hadoop glob patterns: a tenant folder named
    ``a*`` would otherwise read every folder starting with ``a``. Backslash escapes each glob
    character."""
    return "".join("\\" + ch if ch in _GLOB_CHARACTERS else ch for ch in str(folder))


def mentioned_table_folders(folders: list[PurePath], query: str) -> list[PurePath]:
    """The sub-folders (of a lake's root) whose name appears in ``query`` (case-insensitive): the
    tables a query can name. The others are not opened."""
    text = query.casefold()
    return sorted(p for p in folders if not p.name.startswith(".") and p.name.casefold() in text)


def spark_view_name(name: str) -> str:
    """A folder name as a Spark identifier (quoted: folder names may hold '-' or spaces)."""
    return "`" + name.replace("`", "``") + "`"


MICROSECOND = timedelta(microseconds=1)
#: a joint read's copy of the source's last-modified value (see ParquetLakeReader.read_together)
_SOURCE_LAST_MODIFIED = "__tp_source_last_modified"


def _origin_of(frame: DataFrame) -> tuple[str, ...]:
    """``(ORIGIN_COLUMN,)`` if ``frame`` has it, else ``()``."""
    return (ORIGIN_COLUMN,) if ORIGIN_COLUMN in frame.columns else ()


def _last_modified(model: ModelConfig) -> Column:
    return spark_col(model.last_modified.name_in_source)


def _in_bounds(model: ModelConfig, bounds: ReadBounds) -> Column:
    """``lower <= last-modified < upper``, compared in the column's own type."""
    from pyspark.sql import functions as F

    lm, kind = _last_modified(model), model.change_column
    return (lm >= F.lit(kind.bound(bounds.lower))) & (lm < F.lit(kind.bound(bounds.upper)))


def _micros(moment: datetime) -> int:
    return (moment - EPOCH) // MICROSECOND
