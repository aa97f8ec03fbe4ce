"""Object storage: Parquet files and signed manifests in a bucket (vendor ``s3``) or a folder
(vendor ``local``), the same code over two small stores.

Layout under the bucket (or folder) and ``prefix`` (the reference system's):

- ``<prefix>/<model>/dt=YYYY-MM-DD/part-<transfer>-<n>.parquet``: each window's rows, one file
  (``dt``: the day the transfer started, UTC);
- ``<prefix>/_manifests/<model>/dt=YYYY-MM-DD/manifest_<transfer>.json``: one manifest per model
  per transfer naming its files (with SHA-256 and ETag), signed (:mod:`.manifests`);
- ``<prefix>/_transfer_platform/<model>/``: our bookkeeping: ``state.json`` (the watermark, the
  generation, an unfinished full refresh), ``pending/<transfer>.json`` (a transfer at work), and
  the model's lock.

**Write-ahead publish.** A window's data file is written first; then the transfer's manifest is
written again naming every file of the transfer so far (an object is replaced whole: a reader
sees the old or the new manifest), which is the commit; then ``state.json`` records the new
watermark. A file no manifest names is not delivered: a transfer killed before its manifest
leaves such files, and the next transfer of the model deletes them (every transfer announces
itself in ``pending/`` before its first file, so the next one knows whose files to look at). A
crash between the manifest and ``state.json`` re-delivers that window next time.

**Append-only**, as the reference says: files are never rewritten, the lookback re-delivers rows,
an update arrives as a new version of its row and a soft delete as the row with its marker.
A full refresh writes a new generation: its files, then one FULL_REFRESH manifest (generation + 1)
when complete.

**The order of manifests.** Each manifest carries ``sequence``, taken from ``state.json`` under
the model's lock and recorded there before the manifest is first written: each transfer of a model
that writes a manifest has a greater one than every transfer before it, whatever the machines'
clocks say. Consumers apply a model's manifests in increasing ``sequence``
(:func:`manifests.application_order`): a FULL_REFRESH one discards every row held first; per
primary key the row with the latest last-modified value is held (on a tie the one applied later),
rows marked deleted included, and dropped only when the rows are read. Integrity checks read
exactly that (:meth:`ObjectStorageWriter.delivered_rows`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import uuid
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transfer_platform.config.models import LocalStorageDestination, ModelConfig, S3Destination
from transfer_platform.core.columns import column_changes, refuse_column_drops
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations import manifests
from transfer_platform.destinations.base import (
    Prepared,
    WindowLoad,
    WindowResult,
    arrow_schema,
    batch_changes,
    empty_frame,
    newly_marked,
    refuse_bad_rows,
)
from transfer_platform.destinations.locks import FolderLocks
from transfer_platform.destinations.s3 import S3Locks, S3Store, probe_objects, storage_options
from transfer_platform.destinations.staging import Staged, refuse_staged, stage
from transfer_platform.errors import ConfigError, ConnectionFailure, SchemaMismatch
from transfer_platform.phases import log_phase
from transfer_platform.probes import current_user

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.probes import Check

#: how long a transfer waits for the lock of a model that another transfer holds
LOCK_WAIT_SECONDS = 10
BOOKKEEPING = "_transfer_platform"
#: rows per row group of a large window's files (written by Spark's executors)
BATCH_ROWS = 10_000


class Store(Protocol):
    """Objects by key ('/'-separated, relative to the bucket or folder)."""

    where: str  # "bucket B at endpoint E", "folder F": for messages

    def put(self, key: str, data: bytes) -> str:
        """Write an object whole (a reader sees the old or the new one); returns its ETag."""

    def get(self, key: str) -> bytes | None: ...

    def keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix`` (a folder-like prefix ending in '/')."""

    def delete(self, keys: list[str]) -> None: ...

    def etag(self, key: str, md5: str) -> str:
        """The ETag of an object written by pyarrow (``md5``: its content's)."""

    def location(self, key: str) -> str:
        """``key`` as pyarrow's file system (of ``staging_filesystem``) names it."""


class FolderStore:
    """Objects as files under a folder; a file is written aside and renamed into place."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.where = f"folder {self.root}"

    def put(self, key: str, data: bytes) -> str:
        path = self.root / key
        aside = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(aside, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(aside, path)
        except OSError as exc:
            aside.unlink(missing_ok=True)
            raise self._failure("write", key, exc) from None
        return hashlib.md5(data, usedforsecurity=False).hexdigest()  # a single-part S3 ETag

    def get(self, key: str) -> bytes | None:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._failure("read", key, exc) from None

    def etag(self, key: str, md5: str) -> str:
        """A file written whole: its MD5, as a single-part S3 upload's ETag."""
        return md5

    def location(self, key: str) -> str:
        """``key`` as pyarrow's local file system names it."""
        return str((self.root / key).resolve())

    def keys(self, prefix: str) -> list[str]:
        folder = self.root / prefix
        try:
            if not folder.is_dir():
                self.root.mkdir(parents=True, exist_ok=True)  # as a bucket, the folder exists
                return []
            return sorted(str(p.relative_to(self.root)) for p in folder.rglob("*")
                          if p.is_file() and not p.name.startswith("."))
        except OSError as exc:
            raise self._failure("list", prefix, exc) from None

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            try:
                (self.root / key).unlink(missing_ok=True)
            except OSError as exc:
                raise self._failure("delete", key, exc) from None

    def _failure(self, what: str, key: str, exc: OSError) -> ConnectionFailure:
        return ConnectionFailure(f"object storage {self.where} ({what} {key})", reason=exc.strerror or str(exc),
                                 fix=f"let the user transfers run as ({current_user()}) create, write and "
                                     f"delete files in {self.root}, or point connection.path elsewhere")


class ObjectStorageWriter:
    def __init__(self, destination: LocalStorageDestination | S3Destination) -> None:
        self.destination = destination
        self.name = destination.name
        self.store: Store = (FolderStore(destination.connection.path) if destination.vendor == "local"
                             else S3Store(destination.connection, f"destination '{destination.name}'"))
        self.prefix = destination.connection.prefix.strip("/")
        self.bucket_name = (str(destination.connection.path) if destination.vendor == "local"
                            else destination.connection.bucket)
        self._key: Any = None  # the signing key, read at the first manifest
        self._folder_locks = FolderLocks()
        self._s3_locks = S3Locks(self.store) if isinstance(self.store, S3Store) else S3Locks(None)
        self._transfers: dict[str, dict[str, Any]] = {}  # model -> this transfer's files and manifest
        self._started: str | None = None  # when this transfer started (its manifests' start_time)
        # pyarrow's S3 file system for the executors that write a large window's files
        self._options = (None if destination.vendor == "local"
                         else storage_options(destination.connection, f"destination '{destination.name}'"))

    # -- keys ---------------------------------------------------------------------------------

    def _k(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def _book(self, model: str, *parts: str) -> str:
        return self._k(BOOKKEEPING, model, *parts)

    # -- protocol -----------------------------------------------------------------------------

    def check(self) -> None:
        self.store.keys(self._k(BOOKKEEPING) + "/")  # reach, log in, list: raises ConnectionFailure

    def close(self) -> None:
        for model, transfer in self._transfers.items():  # every file named: nothing to clean later
            if transfer["settled"]:
                with suppress(Exception):
                    self.store.delete([self._book(model, "pending", f"{_safe(transfer['transfer_id'])}.json")])
        self._folder_locks.release_all()
        self._s3_locks.release_all()
        self._transfers.clear()
        self._started = None

    def __del__(self) -> None:  # a writer dropped without close() still releases its locks
        if getattr(self, "_folder_locks", None) or getattr(self, "_s3_locks", None):
            self.close()

    def prepare(self, model: ModelConfig, transfer_id: str, *, full_refresh: bool = False) -> Prepared:
        self.check()
        self.lock_model(model, transfer_id)
        self._clean_dead_transfers(model)
        book = self._read_book(model)
        state = ModelState.from_json(book.get("state"))
        refresh = book.get("refresh")
        # a full refresh (asked for, or one carried on) delivers the model's columns as a new
        # generation: only an incremental transfer changes the columns under consumers
        changes = () if full_refresh or refresh is not None else self._schema_changes(model, book)
        day = datetime.now(UTC).strftime("%Y-%m-%d")
        self.store.put(self._book(model.model_name, "pending", f"{_safe(transfer_id)}.json"),
                       json.dumps({"transfer_id": transfer_id, "dt": day}).encode())
        self._transfers[model.model_name] = {"transfer_id": transfer_id, "dt": day, "files": [],
                                             "start_time": self._start_time(), "settled": True, "book": book}
        if full_refresh or (refresh is not None and refresh["columns"] != _columns(model)):
            if refresh is not None:  # an unfinished refresh started again: its files go
                self.store.delete([f["data_file_key"] for f in refresh["files"]])
            refresh = {"state": ModelState(high_watermark=state.high_watermark).to_json(), "files": [],
                       "columns": _columns(model)}
            self._write_book(model, {**book, "refresh": refresh})
        if refresh is not None:
            return Prepared(state, ModelState.from_json(refresh["state"]))
        if changes:
            self._write_book(model, {**book, "columns": _columns(model)})
        return Prepared(state, None, changes)

    def committed_state(self, model: ModelConfig) -> Prepared:
        book = self._read_book(model)
        state = ModelState.from_json(book.get("state"))
        refresh = book.get("refresh")
        if refresh is None:
            return Prepared(state)
        if refresh["columns"] != _columns(model):  # the next transfer starts it again
            return Prepared(state, ModelState(high_watermark=state.high_watermark))
        return Prepared(state, ModelState.from_json(refresh["state"]))

    def write_window(self, frame: DataFrame, load: WindowLoad) -> WindowResult:
        """A window read alone (a large one): Spark's executors write its files where they are
        delivered (one per partition, ``BATCH_ROWS`` rows per row group, their digests read back
        there) and check it; only their summaries come here. A refused window's files are deleted
        at once (a crash leaves them to the next transfer: no manifest names them)."""
        model, name = load.model, load.model.model_name
        transfer = self._transfers[name]
        before = self._state_before(load)
        transfer["settled"] = False  # until a manifest (or the refresh's list) names its files
        folder = self._k(name, f"dt={transfer['dt']}")
        staged = stage(frame, model, before, self.store.location(folder), self._options, batch_rows=BATCH_ROWS,
                       file_prefix=f"part-{_safe(transfer['transfer_id'])}-", compression="zstd", digests=True)
        keys = [f"{folder}/{file.rsplit('/', 1)[-1]}" for file in staged.files]
        try:
            refuse_staged(staged, model, self.name)
            entries = [{"data_file_key": key, "sha256_checksum": sha256, "etag": self.store.etag(key, md5)}
                       for key, (sha256, md5, _) in zip(keys, staged.digests, strict=True)]
        except BaseException:
            self.store.delete(keys)
            transfer["settled"] = True  # nothing unnamed left
            raise
        log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=name,
                  rows=staged.rows, files=len(keys), bytes=sum(size for _, _, size in staged.digests))
        staged.volume = sum(size for _, _, size in staged.digests)  # the files' bytes, as a window here
        max_lm = None if staged.max_last_modified is None else model.change_column.moment(staged.max_last_modified)
        return self._commit_window(load, before, entries, max_lm, staged)

    def write_arrow(self, batch: pa.Table, load: WindowLoad) -> WindowResult:
        """A window already read into this process (with others, in one Spark job)."""
        return self._write_batch(batch, load)

    def write_empty(self, load: WindowLoad) -> WindowResult:
        return self._write_batch(arrow_schema(load.model).empty_table(), load)

    def _write_batch(self, batch: pa.Table, load: WindowLoad) -> WindowResult:
        """A window here as Arrow (small, or empty): checked, written as one file, committed."""
        model, name = load.model, load.model.model_name
        refuse_bad_rows(batch, model, self.name)
        before = self._state_before(load)
        transfer = self._transfers[name]
        transfer["settled"] = False  # until a manifest (or the refresh's list) names its file
        entries, volume = [], 0
        if batch.num_rows:
            data = io.BytesIO()
            pq.write_table(batch, data, compression="zstd")
            data = data.getvalue()
            volume = len(data)
            key = self._k(name, f"dt={transfer['dt']}",
                          f"part-{_safe(transfer['transfer_id'])}-{uuid.uuid4().hex[:12]}.parquet")
            etag = self.store.put(key, data)
            entries.append({"data_file_key": key, "sha256_checksum": hashlib.sha256(data).hexdigest(), "etag": etag})
            log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=name,
                      rows=batch.num_rows, file=key, bytes=volume)
        max_lm, delta_rows = batch_changes(batch, model, before)
        staged = Staged([], batch.num_rows, volume, delta_rows, newly_marked(batch, model, before), None, None)
        return self._commit_window(load, before, entries, max_lm, staged)

    def _state_before(self, load: WindowLoad) -> ModelState:
        book = self._transfers[load.model.model_name]["book"]  # ours, under the lock
        return ModelState.from_json((book["refresh"] if load.into_refresh else book).get("state"))

    def _commit_window(self, load: WindowLoad, before: ModelState, entries: list[dict[str, str]],
                       max_lm: datetime | None, staged: Staged) -> WindowResult:
        """Name the window's files (written) in the transfer's manifest, then record the state;
        a full refresh's files are only listed in its book until it is published."""
        model, name = load.model, load.model.model_name
        transfer = self._transfers[name]
        book = transfer["book"]
        state = before.after_window(load.progress, batch_max_last_modified=max_lm,
                                    configured_start=load.configured_start)
        (book["refresh"]["files"] if load.into_refresh else transfer["files"]).extend(entries)
        if load.into_refresh:  # progress of a refresh: its files, not yet delivered
            self._write_book(model, {**book, "refresh": {**book["refresh"], "state": state.to_json(),
                                                         **_widened(book["refresh"], load)}})
        else:
            generation = book.get("generation", 0)
            transfer.update(_widened(transfer, load))
            self._write_manifest(model, transfer, "INCREMENTAL", generation, transfer["files"],
                                 window=transfer, state=state)
            book = transfer["book"]  # with the sequence the manifest took
            self._write_book(model, {**book, "state": state.to_json(), "generation": generation,
                                     "columns": _columns(model)})
        transfer["settled"] = True
        self._s3_locks.renew(model.model_name, transfer["transfer_id"])
        # rows delivered with their deletion marker count as deleted
        return WindowResult(staged.rows, staged.delta_rows, staged.volume, max_lm, state, staged.marked)

    def publish_refresh(self, model: ModelConfig, transfer_id: str) -> ModelState:
        book = self._transfers[model.model_name]["book"]  # ours, under the lock
        refresh = book["refresh"]
        state = ModelState.from_json(refresh["state"])
        generation = book.get("generation", 0) + 1
        transfer = self._transfers[model.model_name]
        self._write_manifest(model, transfer, manifests.FULL_REFRESH, generation, refresh["files"],
                             window=refresh, state=state)
        self._write_book(model, {"state": state.to_json(), "generation": generation, "sequence": transfer["sequence"],
                                 "columns": refresh["columns"], "refresh": None})
        return state

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """The delivered rows as a consumer keeps them: the current generation's files, per key
        the latest last-modified version, rows marked deleted dropped (unless kept)."""
        rows = self.delivered_rows(model)
        if not rows.num_rows:
            return empty_frame(spark, model)
        return spark.createDataFrame(rows)

    def delivered_rows(self, model: ModelConfig) -> pa.Table:
        schema = arrow_schema(model)
        tables = [_conform(pq.read_table(io.BytesIO(self._file(entry))), schema)
                  for entry in self._current_files(model)]
        rows = pa.concat_tables(tables) if tables else schema.empty_table()
        return latest_per_key(rows, model)

    def has_table(self, model: ModelConfig) -> bool:
        return bool(self._current_files(model))

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        raise ConfigError(f"destination '{self.name}' ({self.destination.vendor}) only adds files: rows "
                          "gone from the source cannot be deleted there (set delete_detection: none)")

    # -- one transfer per model ----------------------------------------------------------------

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """A folder: the model's ``flock`` (as Delta's). A bucket: :class:`S3Locks`."""
        if self.destination.vendor == "local":
            self._folder_locks.acquire(Path(self.destination.connection.path) / self._book("_locks"),
                                       model.model_name, transfer_id, destination=self.name,
                                       wait_seconds=LOCK_WAIT_SECONDS)
            return
        self._s3_locks.acquire(self._book(model.model_name, "lock.json"), model.model_name, transfer_id,
                               destination=self.name, wait_seconds=LOCK_WAIT_SECONDS)

    # -- test-connection ----------------------------------------------------------------------

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        """Reach and list, then an object written, read, replaced and deleted under the prefix
        (where transfers write, manifests and bookkeeping included)."""
        from transfer_platform.probes import Probe

        key = self._k(BOOKKEEPING, f"_tp_probe_{uuid.uuid4().hex[:12]}")
        return probe_objects(Probe(target), self.check, self.store, key, self._k() or "/")

    # -- steps --------------------------------------------------------------------------------

    def _read_book(self, model: ModelConfig) -> dict[str, Any]:
        data = self.store.get(self._book(model.model_name, "state.json"))
        return {} if data is None else json.loads(data)

    def _write_book(self, model: ModelConfig, book: dict[str, Any]) -> None:
        """Write the model's ``state.json``; a transfer at work keeps the copy it wrote (it holds
        the model's lock, so no one else writes it), rather than reading it back each window."""
        self.store.put(self._book(model.model_name, "state.json"), json.dumps(book).encode())
        if model.model_name in self._transfers:
            self._transfers[model.model_name]["book"] = book

    def _write_manifest(self, model: ModelConfig, transfer: dict[str, Any], kind: str, generation: int,
                        files: list[dict[str, str]], *, window: dict[str, Any], state: ModelState) -> None:
        """Write (or write again, grown) the transfer's manifest of the model; ``window``: where
        its ``window_start`` and ``window_end`` are (:func:`_widened`)."""
        name = model.model_name
        key = self._k("_manifests", name, f"dt={transfer['dt']}", f"manifest_{_safe(transfer['transfer_id'])}.json")
        signing_key = self._signing_key()  # a bad key fails before the sequence is taken
        self._take_sequence(model, transfer)
        manifest = {
            "version": manifests.VERSION, "transfer_id": transfer["transfer_id"], "sequence": transfer["sequence"],
            "start_time": transfer["start_time"], "end_time": _now(),
            "window_start": window.get("window_start"), "window_end": window.get("window_end"),
            "model_id": manifests.model_id(name), "model_name": name,
            "bucket_name": self.bucket_name, "bucket_prefix": self.prefix, "manifest_file_key": key,
            "file_format": "PARQUET", "transfer_type": kind, "generation": generation,
            "files": list(files), "transfer_platform_state": json.loads(state.to_json()),
        }
        self.store.put(key, json.dumps(manifests.sign(manifest, signing_key), indent=1).encode())

    def _take_sequence(self, model: ModelConfig, transfer: dict[str, Any]) -> None:
        """The transfer's ``sequence``, once, before its first manifest: one more than the last one
        ``state.json`` records, recorded there first (under the model's lock), so that a transfer
        that dies after its manifest and before its state still leaves the next one a greater number."""
        if transfer.get("sequence") is None:
            book = transfer["book"]
            sequence = book.get("sequence", 0) + 1
            self._write_book(model, {**book, "sequence": sequence})
            transfer["sequence"] = sequence

    def _start_time(self) -> str:
        """When this transfer started: its first model's ``prepare`` (a writer serves one transfer)."""
        if self._started is None:
            self._started = _now()
        return self._started

    def _signing_key(self):  # an Ed25519PrivateKey
        if self._key is None:
            ref = self.destination.signing_key
            text = ref.resolve(f"destination '{self.name}'.signing_key").get_secret_value()
            try:
                self._key = manifests.load_signing_key(text)
            except ValueError as exc:
                raise ConfigError(f"destination '{self.name}': signing_key (variable {ref.env}) is not "
                                  f"usable: {exc}; it must hold {manifests.KEY_FORMAT}") from None
        return self._key

    def _current_files(self, model: ModelConfig) -> list[dict[str, str]]:
        """The files a consumer applies, in the order it applies them (from the last FULL_REFRESH
        manifest on, by sequence; each manifest's files in their order)."""
        found = [json.loads(self.store.get(key) or b"{}")
                 for key in self.store.keys(self._k("_manifests", model.model_name) + "/") if key.endswith(".json")]
        return [entry for manifest in manifests.application_order([m for m in found if m])
                for entry in manifest["files"]]

    def _file(self, entry: dict[str, str]) -> bytes:
        data = self.store.get(entry["data_file_key"])
        if data is None or hashlib.sha256(data).hexdigest() != entry["sha256_checksum"]:
            raise ConnectionFailure(f"object storage {self.store.where}",
                                    reason=f"{entry['data_file_key']} is missing or not the file its manifest names",
                                    fix="run a full refresh of the model")
        return data

    def _clean_dead_transfers(self, model: ModelConfig) -> None:
        """Delete the files of transfers that died before a manifest named them (the model's lock
        is held: no other transfer of it is at work)."""
        name = model.model_name
        refresh = self._read_book(model).get("refresh") or {}
        kept = {f["data_file_key"] for f in refresh.get("files", [])}
        for pending in self.store.keys(self._book(name, "pending") + "/"):
            intent = json.loads(self.store.get(pending) or b"{}")
            tid, day = _safe(intent.get("transfer_id", "")), intent.get("dt", "")
            manifest = self.store.get(self._k("_manifests", name, f"dt={day}", f"manifest_{tid}.json"))
            named = kept | {f["data_file_key"] for f in json.loads(manifest)["files"]} if manifest else kept
            orphans = [key for key in self.store.keys(self._k(name, f"dt={day}") + "/")
                       if key.rsplit("/", 1)[-1].startswith(f"part-{tid}-") and key not in named]
            if orphans:
                self.store.delete(orphans)
                log_phase("clean up", destination=self.name, model=name, transfer_id=intent.get("transfer_id"),
                          orphan_files=len(orphans))
            self.store.delete([pending])

    def _schema_changes(self, model: ModelConfig, book: dict[str, Any]) -> tuple[str, ...]:
        before, now = book.get("columns"), _columns(model)
        if before is None or before == now:
            return ()
        for column, kind in now.items():
            if column in before and before[column] != kind:
                raise SchemaMismatch(
                    f"model '{model.model_name}' -> destination '{self.name}': column '{column}' was "
                    f"delivered as {before[column]} but the model now says {kind}; a type is never "
                    f"changed under consumers. Fix: run a full refresh: transfer-platform transfer "
                    f"{self.name} --model {model.model_name} --full-refresh")
        refuse_column_drops(model.model_name, self.name, f"the files delivered to {self.store.where}",
                            column_changes(list(before), list(now)).dropped, allowed=model.allow_column_drop)
        return tuple([f"added column {c} to {model.model_name}'s files from now on (earlier files lack it)"
                      for c in now if c not in before]
                     + [f"column {c} is no longer in {model.model_name}'s files from now on"
                        for c in before if c not in now])


def latest_per_key(rows: pa.Table, model: ModelConfig) -> pa.Table:
    """The consumer's rule over ``rows`` in the order they were applied: per primary key the row
    with the latest last-modified value, on a tie the one applied later (rows marked deleted then
    dropped, unless the model keeps them)."""
    keys = [c.destination_name for c in model.primary_key]
    lm = model.last_modified.destination_name
    if rows.num_rows:
        applied = pa.array(range(rows.num_rows), pa.int64())
        rows = rows.append_column("_applied", applied).sort_by([(lm, "descending"), ("_applied", "descending")])
        rows = rows.drop_columns(["_applied"])
        first = (rows.append_column("_row", pa.array(range(rows.num_rows), pa.int64()))
                 .group_by(keys, use_threads=False).aggregate([("_row", "min")]))
        rows = rows.take(first.column("_row_min"))
    marker = model.deletion_marker
    if marker is not None and model.removes_deleted_rows and rows.num_rows:
        marks = rows.column(marker.destination_name)
        gone = pc.fill_null(marks, False) if marker.data_type == "boolean" else pc.is_valid(marks)
        rows = rows.filter(pc.invert(gone))
    return rows


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A file's rows with the model's columns now (a column it lacks is NULL)."""
    return pa.table({f.name: table.column(f.name).cast(f.type) if f.name in table.column_names
                     else pa.nulls(table.num_rows, f.type) for f in schema}, schema=schema)


def _widened(holder: dict[str, Any], load: WindowLoad) -> dict[str, str]:
    """``window_start`` and ``window_end`` of ``holder`` (a transfer, or a refresh's record)
    widened to cover what ``load`` read: from where its read began (the lookback included) to the
    end of its window."""
    start, end = load.read_from or load.progress.start, load.progress.end
    if holder.get("window_start") is not None:
        start = min(start, datetime.fromisoformat(holder["window_start"]))
        end = max(end, datetime.fromisoformat(holder["window_end"]))
    return {"window_start": start.isoformat(), "window_end": end.isoformat()}


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _columns(model: ModelConfig) -> dict[str, str]:
    return {f.name: str(f.type) for f in arrow_schema(model)}


def _safe(transfer_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", transfer_id)
