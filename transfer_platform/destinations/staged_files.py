"""A window staged by Spark's executors, never held whole by the process that transfers.

The window is hash-partitioned and sorted on the primary key, so every copy of a key lands next to
the others in one partition; each Python worker (``mapInArrow``: a local session and Spark Connect
alike) writes its partition ``batch_rows`` rows at a time as one Parquet file (a folder, or a
bucket through ``pyarrow.fs.S3FileSystem``: Spark has no S3 connector here), finds NULL keys, NULL
last-modified values and duplicate keys, sums what the window changes (rows newer than the high
watermark, soft deletes, its largest last-modified value), and hands back only that summary per
file (with the file's SHA-256 and MD5 when asked). :func:`refuse_staged` then raises the errors of
``refuse_bad_rows`` for the whole window. Delta stages here and MERGEs from the files; object
storage writes its delivered files so, then names them in its manifest.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import (
    arrow_schema,
    batch_changes,
    duplicate_key_error,
    frame_batches,
    newly_marked,
    null_key_error,
    null_last_modified_error,
    refuse_bad_rows,
    staging_suffix,
)
from transfer_platform.destinations.skeleton import Writer
from transfer_platform.errors import ConnectionFailure
from transfer_platform.phases import log_phase
from transfer_platform.storage.folders import folder_fix, missing_parents

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from transfer_platform.destinations.base import WindowLoad
    from transfer_platform.probes import Probe
    from transfer_platform.storage.s3 import S3Store

#: a window being staged: ``<root>/_tp_staging/[<scope>/]<model>/<window>/part-*.parquet``
STAGING_DIR = "_tp_staging"

#: bytes read at a time when a written file is read back for its digests
_DIGEST_CHUNK = 1 << 20


def stage(frame: DataFrame, model: ModelConfig, state: ModelState, folder: str,
          options: dict[str, str] | None, *, batch_rows: int, file_prefix: str = "part-",
          compression: str = "snappy", digests: bool = False, on_key: bool = True) -> Staged:
    """Spark's executors write the window into ``folder`` (as pyarrow's file system of
    ``options`` names it; one ``<file_prefix><uuid>.parquet`` per non-empty partition) and hand
    back one summary row per file: nothing of the window but that comes to this process.

    ``on_key=False``: each partition written as Spark reads it, without the shuffle and sort on
    the key (a key twice in two files is then not found here: the destination finds it)."""
    from pyspark.sql import functions as F

    schema = arrow_schema(model)
    keys = [F.col(backquoted(c.destination_name)) for c in model.primary_key]
    write = partial(stage_partition, folder=folder, options=options, schema=schema, model=model, state=state,
                    batch_rows=batch_rows, file_prefix=file_prefix, compression=compression, digests=digests)
    frame = frame.select(*[F.col(backquoted(name)) for name in schema.names])
    if on_key:
        frame = frame.repartition(*keys).sortWithinPartitions(*keys)
    rows = frame.mapInArrow(write, _SUMMARY_DDL).collect()
    return Staged.of(rows, model)


def refuse_staged(staged: Staged, model: ModelConfig, destination: str) -> None:
    """``refuse_bad_rows`` for the whole window, from the staged files' summaries: a NULL key
    (by key column, in order), then a NULL last-modified value, then a duplicate key."""
    keys = [c.destination_name for c in model.primary_key]
    for key in keys:
        found = staged.first(f"null_key:{key}")
        if found is not None:
            raise null_key_error(model, destination, key, {k: found[k] for k in keys})
    found = staged.first("null_last_modified")
    if found is not None:
        raise null_last_modified_error(model, destination, {k: found[k] for k in keys})
    found = staged.first("duplicate")
    if found is not None:
        raise duplicate_key_error(model, destination, {k: found[k] for k in keys}, found[_COUNT])


_KIND, _COUNT = "__tp_kind", "__tp_count"
#: what ``mapInArrow`` hands back per staged file (``summary``: an Arrow IPC stream of the rows
#: a check found, and of the file's largest last-modified value)
_SUMMARY_DDL = ("file string, rows long, volume long, delta_rows long, marked long, summary binary, "
                "sha256 string, md5 string, size long")


def backquoted(name: str) -> str:
    """A column's name as Spark and delta-rs's predicates quote it (double quotes make strings)."""
    return "`" + name.replace("`", "``") + "`"


def staging_filesystem(options: dict[str, str] | None):  # -> pyarrow.fs.FileSystem
    """pyarrow's file system for the destination: the local one, or S3's or Azure's built from
    delta-rs's storage options (the same endpoint, region, keys and addressing)."""
    from urllib.parse import urlsplit

    from pyarrow import fs

    if options is None:
        return fs.LocalFileSystem()
    if "gcs_scheme" in options:  # a Google Cloud Storage bucket (storage/gcs.py)
        from transfer_platform.storage.gcs import gcs_filesystem

        return gcs_filesystem(options)
    if "azure_storage_account_name" in options:  # an Azure container (storage/azure.py)
        kwargs = {"account_name": options["azure_storage_account_name"],
                  "account_key": options["azure_storage_account_key"]}
        endpoint = options.get("azure_storage_endpoint")
        if endpoint:  # an emulator's (the account in the path): its host for the Blob and DFS APIs
            parts = urlsplit(endpoint)
            kwargs |= {"blob_storage_authority": parts.netloc, "blob_storage_scheme": parts.scheme,
                       "dfs_storage_authority": parts.netloc, "dfs_storage_scheme": parts.scheme}
        return fs.AzureFileSystem(**kwargs)
    kwargs: dict = {"region": options.get("AWS_REGION"), "access_key": options.get("AWS_ACCESS_KEY_ID"),
                    "secret_key": options.get("AWS_SECRET_ACCESS_KEY")}
    endpoint = options.get("AWS_ENDPOINT_URL")
    if endpoint:
        parts = urlsplit(endpoint)
        kwargs |= {"endpoint_override": parts.netloc + parts.path.rstrip("/"), "scheme": parts.scheme,
                   "force_virtual_addressing": options.get("AWS_FORCE_PATH_STYLE") != "true"}
    return fs.S3FileSystem(**{k: v for k, v in kwargs.items() if v is not None})


def _summary_schema(model: ModelConfig) -> pa.Schema:
    schema = arrow_schema(model)
    names = dict.fromkeys([c.destination_name for c in model.primary_key] + [model.last_modified.destination_name])
    return pa.schema([schema.field(name) for name in names] + [(_KIND, pa.string()), (_COUNT, pa.int64())])


class _Duplicates:
    """The first key that repeats in a stream of batches sorted on the key, and how many times
    it appears (its run may span batches); only the previous row's key is kept."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        self.previous: pa.Table | None = None  # the last row's key columns
        self.found: pa.Table | None = None
        self.count = 0
        self._running = False  # the found key's run goes on into the next batch

    def feed(self, batch: pa.Table) -> None:
        rows = batch.num_rows
        if not rows:
            return
        same = self._same_as_previous(batch)
        start = 0
        if self._running:
            stop = _first(same, False, 0)
            self.count += (rows if stop < 0 else stop)
            self._running = stop < 0
            start = rows if stop < 0 else stop
        if self.found is None and start < rows:
            at = _first(same, True, start)
            if at >= 0:
                self.found = batch.select(self.keys).slice(at, 1)
                stop = _first(same, False, at + 1)
                self.count = 2 + ((rows if stop < 0 else stop) - (at + 1))
                self._running = stop < 0
        self.previous = batch.select(self.keys).slice(rows - 1, 1)

    def _same_as_previous(self, batch: pa.Table) -> pa.Array:
        """Per row: whether its key equals the row's before it (NULLs never equal)."""
        same = None
        for key in self.keys:
            column = batch.column(key).combine_chunks()
            before = (self.previous.column(key).combine_chunks() if self.previous is not None
                      else pa.nulls(1, column.type))
            shifted = pa.concat_arrays([before, column.slice(0, len(column) - 1)])
            equal = pc.fill_null(pc.equal(column, shifted), False)
            same = equal if same is None else pc.and_(same, equal)
        return same


def _first(flags: pa.Array, value: bool, start: int) -> int:
    """The index of the first ``value`` in ``flags`` from ``start``, or -1."""
    if start >= len(flags):
        return -1
    found = pc.index(flags, value, start=start).as_py()
    return -1 if found is None else found


def stage_partition(batches: Iterable[pa.RecordBatch], *, folder: str, options: dict[str, str] | None,
                    schema: pa.Schema, model: ModelConfig, state: ModelState, batch_rows: int,
                    file_prefix: str = "part-", compression: str = "snappy",
                    digests: bool = False) -> Iterator[pa.RecordBatch]:
    """In an executor's Python worker: write one partition of the window (sorted on the key)
    into one Parquet file under ``folder``, ``batch_rows`` rows per row group, and yield one
    summary row for it (nothing for an empty partition)."""
    import pyarrow.parquet as pq

    filesystem = staging_filesystem(options)
    summary_schema = _summary_schema(model)
    keys = [c.destination_name for c in model.primary_key]
    lm_name = model.last_modified.destination_name
    duplicates = _Duplicates(keys)
    found: dict[str, pa.Table] = {}  # check -> the first row it found
    writer, path = None, f"{folder}/{file_prefix}{uuid.uuid4().hex}.parquet"
    rows = volume = delta_rows = marked = 0
    largest = None
    try:
        for arrived in batches:
            if not arrived.num_rows:
                continue
            batch = pa.Table.from_batches([arrived]).select(schema.names).cast(schema)
            if writer is None:
                if options is None:  # a folder; in a bucket, a folder marker would outlive the staging
                    filesystem.create_dir(folder, recursive=True)
                writer = pq.ParquetWriter(path, schema, filesystem=filesystem, compression=compression)
            writer.write_table(batch, row_group_size=batch_rows)
            rows += batch.num_rows
            volume += batch.nbytes
            delta_rows += batch_changes(batch, model, state)[1]
            marked += newly_marked(batch, model, state)
            for kind, column in [*((f"null_key:{k}", k) for k in keys), ("null_last_modified", lm_name)]:
                if kind not in found:
                    nulls = batch.filter(pc.is_null(batch.column(column)))
                    if nulls.num_rows:
                        found[kind] = nulls.slice(0, 1)
            duplicates.feed(batch)
            high = pc.max(batch.column(lm_name))
            if high.is_valid and (largest is None or pc.greater(high, largest).as_py()):
                largest = high
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        return
    if duplicates.found is not None:
        found["duplicate"] = duplicates.found
    parts = [_summary_row(table, kind, duplicates.count if kind == "duplicate" else 1, summary_schema)
             for kind, table in found.items()]
    if largest is not None:
        parts.append(_summary_row(pa.table({lm_name: pa.array([largest.as_py()], largest.type)}), "max",
                                  0, summary_schema))
    sha256, md5, size = _digests(filesystem, path) if digests else (None, None, None)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, summary_schema) as stream:
        for part in parts:
            stream.write_table(part)
    yield pa.RecordBatch.from_pylist(
        [{"file": path, "rows": rows, "volume": volume, "delta_rows": delta_rows, "marked": marked,
          "summary": sink.getvalue().to_pybytes(), "sha256": sha256, "md5": md5,
          "size": size}],
        schema=pa.schema([("file", pa.string()), ("rows", pa.int64()), ("volume", pa.int64()),
                          ("delta_rows", pa.int64()), ("marked", pa.int64()), ("summary", pa.binary()),
                          ("sha256", pa.string()), ("md5", pa.string()), ("size", pa.int64())]))


def _digests(filesystem, path: str) -> tuple[str, str, int]:  # a pyarrow FileSystem
    """A written file's SHA-256, MD5 (a single-part upload's ETag) and size, read back a chunk at
    a time."""
    import hashlib

    sha256, md5, size = hashlib.sha256(), hashlib.md5(usedforsecurity=False), 0
    with filesystem.open_input_stream(path) as stream:
        while chunk := stream.read(_DIGEST_CHUNK):
            sha256.update(chunk)
            md5.update(chunk)
            size += len(chunk)
    return sha256.hexdigest(), md5.hexdigest(), size


def _summary_row(row: pa.Table, kind: str, count: int, schema: pa.Schema) -> pa.Table:
    """One row of the summary: ``row``'s key and last-modified columns (NULL where it lacks one)."""
    columns = [row.column(f.name).cast(f.type) if f.name in row.column_names else pa.nulls(1, f.type)
               for f in schema if f.name not in (_KIND, _COUNT)]
    return pa.Table.from_arrays([*columns, pa.array([kind]), pa.array([count], pa.int64())], schema=schema)


class Staged:
    """A staged window as this process knows it: its files and what the executors summed up."""

    def __init__(self, files: list[str], rows: int, volume: int, delta_rows: int, marked: int,
                 found: pa.Table | None, max_last_modified: object, digests: list | None = None) -> None:
        self.files, self.rows, self.volume = files, rows, volume
        self.digests = digests or []  # per file: (SHA-256, MD5, bytes), when asked
        self.delta_rows, self.marked = delta_rows, marked
        self._found = found
        self.max_last_modified = max_last_modified  # the last-modified column's value, or None

    @classmethod
    def empty(cls) -> Staged:
        return cls([], 0, 0, 0, 0, None, None)

    @classmethod
    def of(cls, rows: list, model: ModelConfig) -> Staged:
        summaries = [pa.ipc.open_stream(row["summary"]).read_all() for row in rows]
        found = pa.concat_tables(summaries) if summaries else None
        largest = None
        if found is not None:
            highs = found.filter(pc.equal(found.column(_KIND), "max")).column(model.last_modified.destination_name)
            largest = pc.max(highs).as_py() if len(highs) else None
        return cls([row["file"] for row in rows], sum(row["rows"] for row in rows),
                   sum(row["volume"] for row in rows), sum(row["delta_rows"] for row in rows),
                   sum(row["marked"] for row in rows), found, largest,
                   [(row["sha256"], row["md5"], row["size"]) for row in rows])

    @classmethod
    def of_batch(cls, batch: pa.Table, model: ModelConfig, state: ModelState) -> Staged:
        """What the executors would have summed up, for a window in memory (already checked)."""
        _, delta_rows = batch_changes(batch, model, state)
        largest = pc.max(batch.column(model.last_modified.destination_name)).as_py() if batch.num_rows else None
        return cls([], batch.num_rows, batch.nbytes, delta_rows, newly_marked(batch, model, state), None, largest)

    def first(self, kind: str) -> dict | None:
        """The first row a check of ``kind`` found in any file (as Python values), or None."""
        if self._found is None:
            return None
        rows = self._found.filter(pc.equal(self._found.column(_KIND), kind))
        if not rows.num_rows:
            return None
        return rows.slice(0, 1).to_pylist()[0]


class StagedWindow(NamedTuple):
    """A window staged by the executors (``batch`` None) or held here as Arrow."""

    staged: Staged
    batch: pa.Table | None = None


@dataclass
class WindowTarget:
    """A table windows commit to in one model's transfer, opened once (opening replays its log,
    which grows by a commit per window): under the model's lock no one else commits to it, and
    the table object is brought up to date with each of our commits. ``state``: the model's state
    in its newest commit; ``keys``: every key in the table while they are all known (it had no row
    when the transfer first committed to it: see :meth:`StagedFilesWriter._new_keys`), else ``None``."""

    table: Any  # a deltalake DeltaTable, a pyiceberg Table
    state: ModelState
    keys: set | None


class StagedFilesWriter(Writer, abstract=True):
    """A table format's writer whose windows are staged as files under its root (a folder, or a
    bucket: ``s3`` its store, ``options`` pyarrow's storage options): a window read alone is staged
    by Spark's executors in ``<root>/_tp_staging/``; one read into this process is not staged."""

    root: Any  # a Path, or a bucket's URI
    prefix: str
    s3: S3Store | None
    options: dict[str, str] | None
    staging_scope = ""  # a folder between _tp_staging/ and the model's (Iceberg: the namespace)

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def _check_root(self, what: str, setting: str) -> None:
        """Reach, log in and list the bucket (its clear errors), or create the folder: else
        ``ConnectionFailure`` naming ``what`` and ``setting``."""
        if self.s3 is not None:
            self.s3.keys(self._key() + "/")
            return
        try:
            Path(self.root).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConnectionFailure(f"{what} (folder {self.root})", reason=str(exc),
                                    fix=f"check {setting} and its permissions") from None

    @contextmanager
    def _probe_root(self, probe: Probe, name: str) -> Iterator[list[Path] | None]:
        """``test-connection``'s root folder: created if missing (the folders created are
        yielded, and removed afterwards); ``None`` (the check ``name`` failed) if it cannot be."""
        root = Path(self.root)
        created = missing_parents(root)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            probe.failed(name, exc.strerror or str(exc), folder_fix(created[0] if created else root))
            yield None
            return
        try:
            yield created
        finally:
            for folder in reversed(created):
                shutil.rmtree(folder, ignore_errors=True)

    def _deleted_batches(self, frame: DataFrame, model: ModelConfig) -> Iterator[pa.Table]:
        """The delete sweep's rows (key and last-modified value), ``Tuning.delete_batch_rows`` at a time."""
        columns = [c.destination_name for c in model.primary_key] + [model.last_modified.destination_name]
        schema = pa.schema([arrow_schema(model).field(c) for c in columns])
        return frame_batches(frame.select(*columns), schema, self.tuning.delete_batch_rows)

    def _remove(self, location: str) -> None:
        """A folder and what it holds, or every object under a bucket's prefix."""
        if self.s3 is None:
            shutil.rmtree(location.removeprefix("file://"), ignore_errors=True)
        else:
            self.s3.delete(self.s3.keys(location.removeprefix(f"{self.s3.uri}/").rstrip("/") + "/"))

    def _staging_path(self, model: ModelConfig, window: str = "") -> str:
        """A window's staging folder (or the model's, without ``window``)."""
        return "/".join(p for p in (str(self.root), STAGING_DIR, self.staging_scope, model.model_name, window) if p)

    def _clean_staging(self, model: ModelConfig) -> None:
        self._remove(self._staging_path(model))  # a dead transfer's windows: ours alone under the lock

    def _create_staging(self, load: WindowLoad, *, in_memory: bool) -> str | None:
        if in_memory:
            return None
        return self._staging_path(load.model, f"{staging_suffix(load.model.model_name, load.transfer_id)}_"
                                              f"{uuid.uuid4().hex[:12]}")

    def _remove_staging(self, folder: str, load: WindowLoad) -> None:
        self._remove(folder)

    def _staged(self, frame: Any, batch: pa.Table | None, folder: Any, load: WindowLoad,
                state: ModelState) -> StagedWindow:
        """Spark's executors write ``frame`` into ``folder`` and sum it up; ``batch``, already here,
        is summed up as they would have."""
        model = load.model
        if batch is not None:
            staged, files = Staged.of_batch(batch, model, state=state), {}
        else:
            location = folder.split("://", 1)[1] if self.s3 is not None else str(Path(folder).resolve())
            staged = stage(frame, model, state, location, self.options, batch_rows=self.tuning.batch_rows)
            files = {"files": len(staged.files)}
        log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=model.model_name,
                  rows=staged.rows, in_memory_bytes=staged.volume, **files)
        return StagedWindow(staged, batch)

    def _new_keys(self, target: WindowTarget, batch: pa.Table, model: ModelConfig) -> bool:
        """Whether ``batch``'s keys are known to be new to the target's table (then it is appended,
        not merged); the keys known grow by them, and are forgotten past ``Tuning.append_keys_max``."""
        if target.keys is None or not batch.num_rows:
            return False
        keys = key_values(batch, model)
        new = target.keys.isdisjoint(keys)
        target.keys.update(keys)
        if len(target.keys) > self.tuning.append_keys_max:
            target.keys = None
        return new

    def _refuse(self, window: StagedWindow, load: WindowLoad) -> None:
        if window.batch is not None:
            refuse_bad_rows(window.batch, load.model, self.name)
        else:
            refuse_staged(window.staged, load.model, self.name)


def key_values(batch: pa.Table, model: ModelConfig) -> list:
    """The batch's primary keys, as values (one column) or tuples."""
    columns = [batch.column(c.destination_name).to_pylist() for c in model.primary_key]
    return columns[0] if len(columns) == 1 else list(zip(*columns, strict=True))
