"""Object storage: Parquet files and signed manifests in a bucket (vendor ``s3``), an Azure
container (vendor ``abs``), a folder (vendor ``local``) or a folder of an SFTP server (vendor
``sftp``), the same code over small stores (``storage/stores.py``, chosen once
by the connection's type). The order of ``prepare``, of a window's write and of a refresh's
publish is ``destinations/skeleton.py``'s; this module implements its primitives.

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
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transfer_platform.config.models import ModelConfig
from transfer_platform.config.signing_keys import KEY_FORMAT, load_signing_key
from transfer_platform.core.columns import ColumnChanges, column_changes, refuse_column_drops
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations import manifests
from transfer_platform.destinations.base import (
    WindowLoad,
    WindowResult,
    arrow_schema,
    conformed,
    empty_frame,
    marked_mask,
    refuse_bad_rows,
)
from transfer_platform.destinations.skeleton import STALE, Writer, next_state
from transfer_platform.destinations.staged_files import Staged, backquoted, refuse_staged, stage
from transfer_platform.errors import ConfigError, ConnectionFailure, SchemaMismatch
from transfer_platform.phases import log_phase
from transfer_platform.storage.s3 import probe_objects
from transfer_platform.storage.stores import Store, store_for
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.object_storage import (
    AzureBlobDestination,
    LocalStorageDestination,
    S3Destination,
    SFTPDestination,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.destinations.skeleton import Stale
    from transfer_platform.probes import Check

BOOKKEEPING = "_transfer_platform"


@dataclass
class _Window:
    """A window on its way: its files written by Spark's executors (``keys``, ``entries``,
    ``staged``) or its rows here (``batch``), and the state it moves from."""

    before: ModelState
    batch: pa.Table | None = None
    keys: list[str] = field(default_factory=list)
    entries: list[dict[str, str]] = field(default_factory=list)
    staged: Staged | None = None


class ObjectStorageWriter(Writer):
    def __init__(self, destination: LocalStorageDestination | S3Destination | AzureBlobDestination | SFTPDestination,
                 tuning: Tuning = DEFAULT) -> None:
        super().__init__(destination, tuning)
        self.store: Store = store_for(destination.connection, f"destination '{destination.name}'")
        self.prefix = destination.connection.prefix.strip("/")
        self.bucket_name = self.store.bucket_name
        self._key: Any = None  # the signing key, read at the first manifest
        self._transfers: dict[str, dict[str, Any]] = {}  # model -> this transfer's files and manifest
        self._books: dict[str, dict[str, Any]] = {}  # model -> its state.json as last read
        self._started: str | None = None  # when this transfer started (its manifests' start_time)

    # -- keys ---------------------------------------------------------------------------------

    def _k(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def _book(self, model: str, *parts: str) -> str:
        return self._k(BOOKKEEPING, model, *parts)

    # -- connection ---------------------------------------------------------------------------

    def check(self) -> None:
        self.store.keys(self._k(BOOKKEEPING) + "/")  # reach, log in, list: raises ConnectionFailure

    def close(self) -> None:
        for model, transfer in self._transfers.items():  # every file named: nothing to clean later
            if transfer["settled"]:
                with suppress(Exception):
                    self.store.delete([self._book(model, "pending", f"{_safe(transfer['transfer_id'])}.json")])
        self.store.release_all()
        self._transfers.clear()
        self._books.clear()
        self._started = None

    def __del__(self) -> None:  # a writer dropped without close() still releases its locks
        store = getattr(self, "store", None)
        if store is not None and store.holds_locks():
            self.close()

    # -- prepare's primitives -----------------------------------------------------------------

    def _reach(self) -> None:
        self.check()

    def _read_states(self, model: ModelConfig) -> tuple[ModelState, ModelState | Stale | None]:
        book = self._books[model.model_name] = self._read_book(model)
        state = ModelState.from_json(book.get("state"))
        refresh = book.get("refresh")
        if refresh is None:
            return state, None
        if refresh["columns"] != _columns(model):  # the model changed meanwhile: it starts again
            return state, STALE
        return state, ModelState.from_json(refresh["state"])

    def _announce(self, model: ModelConfig, transfer_id: str) -> None:
        """Every transfer announces itself in ``pending/`` before its first file, so that the
        next one knows whose files to look at if it dies before a manifest names them."""
        day = datetime.now(UTC).strftime("%Y-%m-%d")
        self._started = self._started or _now()  # its first model's prepare (a writer serves one transfer)
        self.store.put(self._book(model.model_name, "pending", f"{_safe(transfer_id)}.json"),
                       json.dumps({"transfer_id": transfer_id, "dt": day}).encode())
        self._transfers[model.model_name] = {"transfer_id": transfer_id, "dt": day, "files": [],
                                             "start_time": self._started, "settled": True,
                                             "book": self._books[model.model_name]}

    def _begin_refresh(self, model: ModelConfig, live: ModelState) -> ModelState:
        """A full refresh (asked for, or one carried on) delivers the model's columns as a new
        generation: its files are listed in the book until it is published. An unfinished
        refresh started again: its files go."""
        book = self._transfers[model.model_name]["book"]
        old = book.get("refresh")
        if old is not None:
            self.store.delete([f["data_file_key"] for f in old["files"]])
        refresh = {"state": ModelState(high_watermark=live.high_watermark).to_json(), "files": [],
                   "columns": _columns(model)}
        self._write_book(model, {**book, "refresh": refresh})
        return ModelState.from_json(refresh["state"])

    def _plan_columns(self, model: ModelConfig) -> ColumnChanges:
        """The columns delivered before against the model's: only an incremental transfer changes
        the columns under consumers; a changed type is refused, a drop unless allowed."""
        before, now = self._books[model.model_name].get("columns"), _columns(model)
        if before is None or before == now:
            return ColumnChanges((), ())
        for column, kind in now.items():
            if column in before and before[column] != kind:
                raise SchemaMismatch(
                    f"model '{model.model_name}' -> destination '{self.name}': column '{column}' was "
                    f"delivered as {before[column]} but the model now says {kind}; a type is never "
                    f"changed under consumers. Fix: run a full refresh: transfer-platform transfer "
                    f"{self.name} --model {model.model_name} --full-refresh")
        planned = column_changes(list(before), list(now))
        refuse_column_drops(model.model_name, self.name, f"the files delivered to {self.store.where}",
                            planned.dropped, allowed=model.allow_column_drop)
        return planned

    def _apply_columns(self, model: ModelConfig, planned: ColumnChanges, state: ModelState) -> tuple[str, ...]:
        changes = tuple([f"added column {c} to {model.model_name}'s files from now on (earlier files lack it)"
                         for c in planned.added]
                        + [f"column {c} is no longer in {model.model_name}'s files from now on"
                           for c in planned.dropped])
        if changes:
            self._write_book(model, {**self._transfers[model.model_name]["book"], "columns": _columns(model)})
        return changes

    # -- a window -------------------------------------------------------------------------------

    def _create_staging(self, load: WindowLoad, *, in_memory: bool) -> None:
        """Nothing is staged aside: a window's files are written where they are delivered, and
        delivered once a manifest names them."""
        return None

    def _stage_frame(self, frame: DataFrame, staging: None, load: WindowLoad) -> _Window:
        """A window read alone (a large one): Spark's executors write its files where they are
        delivered (one per partition, ``Tuning.batch_rows`` rows per row group, their digests read
        back there) and check it; only their summaries come here. A store Spark's executors
        cannot write to (``writes_here``: SFTP) has the window's rows brought here and written
        as one file, as a small window's (:meth:`_stage_arrow`)."""
        if getattr(self.store, "writes_here", False):
            return self._stage_arrow(_arrow_of(frame, load.model), staging, load)
        model, name = load.model, load.model.model_name
        transfer = self._transfers[name]
        before = self._state_before(load)
        transfer["settled"] = False  # until a manifest (or the refresh's list) names its files
        folder = self._k(name, f"dt={transfer['dt']}")
        staged = stage(frame, model, before, self.store.location(folder), self.store.options,
                       batch_rows=self.tuning.batch_rows, file_prefix=f"part-{_safe(transfer['transfer_id'])}-",
                       compression="zstd", digests=True)
        window = _Window(before, keys=[f"{folder}/{file.rsplit('/', 1)[-1]}" for file in staged.files],
                         staged=staged)
        with self._deleted_if_failed(window, transfer):
            window.entries = [{"data_file_key": key, "sha256_checksum": sha256, "etag": self.store.etag(key, md5)}
                              for key, (sha256, md5, _) in zip(window.keys, staged.digests, strict=True)]
        return window

    def _stage_arrow(self, batch: pa.Table, staging: None, load: WindowLoad) -> _Window:
        """A window here as Arrow (small): written as one file once checked (:meth:`_commit`)."""
        return _Window(self._state_before(load), batch=batch)

    def _refuse(self, window: _Window, load: WindowLoad) -> None:
        """The window's rules; a refused window's files are deleted at once (a crash leaves them
        to the next transfer: no manifest names them)."""
        if window.batch is not None:
            refuse_bad_rows(window.batch, load.model, self.name)
            return
        with self._deleted_if_failed(window, self._transfers[load.model.model_name]):
            refuse_staged(window.staged, load.model, self.name)

    @contextmanager
    def _deleted_if_failed(self, window: _Window, transfer: dict[str, Any]) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self.store.delete(window.keys)
            transfer["settled"] = True  # nothing unnamed left
            raise

    def _commit(self, window: _Window | None, load: WindowLoad) -> WindowResult:
        """Name the window's files in the transfer's manifest (the commit), then record the state."""
        model, name = load.model, load.model.model_name
        if window is None:  # no row: the state alone (a manifest naming no new file)
            window = _Window(self._state_before(load), batch=arrow_schema(model).empty_table())
        if window.batch is not None:
            return self._commit_batch(window.batch, window.before, load)
        staged = window.staged
        staged.volume = sum(size for _, _, size in staged.digests)  # the files' bytes, as a window here
        log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=name,
                  rows=staged.rows, files=len(window.keys), bytes=staged.volume)
        return self._commit_window(load, window.before, window.entries, staged)

    def _remove_staging(self, staging: None, load: WindowLoad) -> None:
        """Nothing was staged aside (see :meth:`_create_staging`)."""

    def _commit_batch(self, batch: pa.Table, before: ModelState, load: WindowLoad) -> WindowResult:
        """A checked window here as Arrow: written as one file (none if empty), then committed."""
        model, name = load.model, load.model.model_name
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
        staged = Staged.of_batch(batch, model, before)
        staged.volume = volume  # the file's bytes, as a staged window's
        return self._commit_window(load, before, entries, staged)

    def _state_before(self, load: WindowLoad) -> ModelState:
        book = self._transfers[load.model.model_name]["book"]  # ours, under the lock
        return ModelState.from_json((book["refresh"] if load.into_refresh else book).get("state"))

    def _commit_window(self, load: WindowLoad, before: ModelState, entries: list[dict[str, str]],
                       staged: Staged) -> WindowResult:
        """Name the window's files (written) in the transfer's manifest, then record the state;
        a full refresh's files are only listed in its book until it is published."""
        model, name = load.model, load.model.model_name
        transfer = self._transfers[name]
        book = transfer["book"]
        max_lm = None if staged.max_last_modified is None else model.change_column.moment(staged.max_last_modified)
        state = next_state(before, load, max_lm)
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
        self.store.renew(model.model_name, transfer["transfer_id"])
        # rows delivered with their deletion marker count as deleted
        return WindowResult(staged.rows, staged.delta_rows, staged.volume, max_lm, state, staged.marked)

    # -- the full refresh's publish -------------------------------------------------------------

    def _refresh_state(self, model: ModelConfig) -> ModelState:
        book = self._transfers[model.model_name]["book"]  # ours, under the lock
        return ModelState.from_json(book["refresh"]["state"])

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        """One FULL_REFRESH manifest (generation + 1) naming the refresh's files, then the book."""
        transfer = self._transfers[model.model_name]
        book = transfer["book"]
        refresh = book["refresh"]
        generation = book.get("generation", 0) + 1
        self._write_manifest(model, transfer, manifests.FULL_REFRESH, generation, refresh["files"],
                             window=refresh, state=state)
        self._write_book(model, {"state": state.to_json(), "generation": generation, "sequence": transfer["sequence"],
                                 "columns": refresh["columns"], "refresh": None})

    # -- outside a transfer's windows -------------------------------------------------------------

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """The delivered rows as a consumer keeps them: the current generation's files, per key
        the latest last-modified version, rows marked deleted dropped (unless kept)."""
        rows = self.delivered_rows(model)
        if not rows.num_rows:
            return empty_frame(spark, model)
        return spark.createDataFrame(rows)

    def delivered_rows(self, model: ModelConfig) -> pa.Table:
        schema = arrow_schema(model)
        tables = [conformed(pq.read_table(io.BytesIO(self._file(entry))), schema)  # the columns now
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
        """The store's kind of lock: a folder's ``flock`` (as Delta's), a bucket's lock object."""
        self.store.lock(self._k(BOOKKEEPING), model.model_name, transfer_id, destination=self.name,
                        wait_seconds=self.tuning.lock_wait_seconds)

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

    def _signing_key(self):  # an Ed25519PrivateKey
        if self._key is None:
            ref = self.destination.signing_key
            text = ref.resolve(f"destination '{self.name}'.signing_key").get_secret_value()
            try:
                self._key = load_signing_key(text)
            except ValueError as exc:
                raise ConfigError(f"destination '{self.name}': signing_key ({ref}) is not "
                                  f"usable: {exc}; it must hold {KEY_FORMAT}") from None
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

    def _clean_staging(self, model: ModelConfig) -> None:
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
        rows = rows.filter(pc.invert(marked_mask(rows, model)))
    return rows


def _arrow_of(frame: DataFrame, model: ModelConfig) -> pa.Table:
    """A window's rows brought into this process as Arrow, in the model's columns and types."""
    from pyspark.sql import functions as F

    schema = arrow_schema(model)
    names = [F.col(backquoted(name)) for name in schema.names]
    return frame.select(*names).toArrow().select(schema.names).cast(schema)


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
