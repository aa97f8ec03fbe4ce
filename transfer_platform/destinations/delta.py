"""Delta Lake destination, written with the ``deltalake`` package (delta-rs).

Per window, without ever holding the window in the process that transfers: Spark's executors
stage it as Parquet files under ``_tp_staging/<model>/<window>/`` in the destination (a folder, a
bucket, or an Azure container (``az://``), through pyarrow's file systems: Spark has no S3 or
Azure connector here), and check and sum it up there (:mod:`.staged_files`). The batch is refused
(same errors as ``refuse_bad_rows``) before any commit; otherwise one MERGE commit upserts the
staged files, read back ``Tuning.batch_rows`` rows at a time (a ``pyarrow`` scanner streamed into
delta-rs), on the primary key (never replacing a row by an older one; an ``is_append_only``
model's MERGE only inserts rows whose key is new) with the model's new state in the commit's
metadata. When the MERGE changes nothing, delta-rs makes no commit, so an empty append records
the state instead. A window read into this process (small, read with its neighbours) whose keys
cannot be in the table is appended instead of merged (a fraction of a MERGE's cost: no join with
the table's files): the table was empty when the transfer first committed to it and no key of the
window was written by an earlier window of this transfer (the writer remembers them, up to
``Tuning.append_keys_max`` keys, a Python set of ~100 bytes a key; a MERGE after that). That is a
backfill's or a full refresh's table, window after window. The window's staging is removed
whatever happens; a crash before the commit changes nothing, and what a killed transfer left in
``_tp_staging/<model>/`` is removed by the model's next transfer (under the model's lock).
(delta-rs's MERGE itself builds its hash join in Rust memory from the source and the target files
it reads: that part is delta-rs's and is not bounded by ``Tuning.batch_rows``.)

The order of ``prepare``, of a window's write and of a refresh's publish is
``destinations/skeleton.py``'s; this module implements its primitives.

One transfer per model at a time, however it was started: the writer holds an exclusive
``flock`` on ``_tp_locks/<model>.lock`` in the destination folder from ``prepare`` until
``close`` (the operating system releases it when the process dies); a second transfer waits up
to ``Tuning.lock_wait_seconds`` and is refused, naming the first. Delta's own commit conflict
detection stays as a second line: a MERGE whose files changed under it fails instead of committing.

A full refresh loads the same way into a Delta table built aside (``_refresh/<model>``, with its
own state in its commits); once complete, one overwrite commit of the live table publishes it
(with ``schema_mode="overwrite"`` when the columns changed), so readers see the old version until
then. Schema evolution on an incremental transfer: a column added to the model is added by an
empty ``schema_mode="merge"`` append; a column removed is dropped, only with the model's
``allow_column_drop`` (otherwise refused, naming it), by rewriting the table in one overwrite
commit (delta-rs cannot drop a column in place); a changed type is refused. Refusals come before
the first commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from transfer_platform.config.connection_settings import AzureBlobConnection, S3Connection
from transfer_platform.config.models import ModelConfig
from transfer_platform.core.columns import (
    ColumnChanges,
    change_sentences,
    column_changes,
    refuse_column_drops,
)
from transfer_platform.core.sql import marked_deleted
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import (
    WindowLoad,
    WindowResult,
    arrow_schema,
    conformed,
    empty_frame,
    marked_mask,
)
from transfer_platform.destinations.skeleton import STALE, next_state
from transfer_platform.destinations.staged_files import (
    Staged,
    StagedFilesWriter,
    StagedWindow,
    WindowTarget,
    backquoted,
    staging_filesystem,
)
from transfer_platform.errors import SchemaMismatch
from transfer_platform.storage.folders import probe_folder
from transfer_platform.storage.locks import FileLock, Locks
from transfer_platform.storage.s3 import ObjectLock, S3Store, probe_objects, storage_options
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.delta import DeltaDestination

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.destinations.skeleton import Stale
    from transfer_platform.probes import Check

STATE_KEY = "transfer_platform.state"
TRANSFER_KEY = "transfer_platform.transfer_id"
REFRESH_DIR = "_refresh"
LOCK_DIR = "_tp_locks"
#: staged files the MERGE's reader opens ahead, and batches it decodes ahead (pyarrow's own
#: defaults, 4 and 16, would hold more batches in memory at once)
_FRAGMENT_READAHEAD = 1
_BATCH_READAHEAD = 2
_HISTORY_PAGE = 100

def merge_predicates(model: ModelConfig) -> tuple[str, str]:
    """(join on the key, when a matched row may be replaced): newer, or equally new and different."""
    join = " AND ".join(f"t.{backquoted(c.destination_name)} = s.{backquoted(c.destination_name)}"
                        for c in model.primary_key)
    lm = backquoted(model.last_modified.destination_name)
    compared = [c.destination_name for c in model.columns
                if not c.is_primary_key and not c.is_last_modified]
    newer = f"s.{lm} > t.{lm}"
    if not compared:
        return join, newer
    # each comparison in its own parentheses: the predicate parser binds OR tighter than IS DISTINCT FROM
    differs = " OR ".join(f"(s.{backquoted(c)} IS DISTINCT FROM t.{backquoted(c)})" for c in compared)
    return join, f"{newer} OR (s.{lm} = t.{lm} AND ({differs}))"


class DeltaWriter(StagedFilesWriter):
    def __init__(self, destination: DeltaDestination, tuning: Tuning = DEFAULT) -> None:
        super().__init__(destination, tuning)
        self._tables: dict[str, WindowTarget] = {}  # see _target
        connection = destination.connection
        self._locks = Locks()  # the models' locks this writer holds
        if isinstance(connection, S3Connection | AzureBlobConnection):  # s3://<bucket>/<prefix>/, az://...
            owner = f"destination '{destination.name}'"
            self.s3: S3Store | None
            if isinstance(connection, AzureBlobConnection):  # the same methods as S3Store's
                from transfer_platform.storage import azure

                self.s3 = azure.AzureStore(connection, owner)  # type: ignore[assignment]
                self.options: dict[str, str] | None = azure.storage_options(connection, owner)
            else:
                self.s3, self.options = S3Store(connection, owner), storage_options(connection, owner)
            self.prefix = connection.prefix.strip("/")
            self.root = self.s3.uri + (f"/{self.prefix}" if self.prefix else "")
        else:
            self.s3, self.options = None, None
            self.root = Path(connection.path)

    def close(self) -> None:
        """Release the models' locks and forget the tables opened for windows."""
        self._tables.clear()
        self._locks.release_all()

    def __del__(self) -> None:  # a writer dropped without close() still releases its locks
        if getattr(self, "_locks", None):
            self.close()

    def check(self) -> None:
        self._check_root(f"Delta destination '{self.name}'", "connection.path")

    def table_path(self, model: ModelConfig) -> str:
        """Where the model's table is: a folder, or an ``s3://`` URI."""
        return f"{self.root}/{model.model_name}"

    def refresh_path(self, model: ModelConfig) -> str:
        return f"{self.root}/{REFRESH_DIR}/{model.model_name}"

    # -- the table, in a folder or a bucket -----------------------------------------------------

    def _open(self, location: str) -> DeltaTable:
        from deltalake import DeltaTable

        return DeltaTable(location, storage_options=self.options)

    def _exists(self, location: str) -> bool:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(location, storage_options=self.options)

    # -- prepare's primitives -----------------------------------------------------------------

    def _reach(self) -> None:
        self._tables.clear()  # opened again: what follows commits or replaces tables
        self.check()

    def _read_states(self, model: ModelConfig) -> tuple[ModelState, ModelState | Stale | None]:
        """The states recorded in the live table's and the refresh table's commits, read only:
        no folder is created (unlike :meth:`check`), a missing table means nothing committed."""
        path = self.table_path(model)
        state = read_state(self._open(path)) if self._exists(path) else ModelState()
        aside_path = self.refresh_path(model)
        if not self._exists(aside_path):
            return state, None
        aside = self._open(aside_path)
        if _schema_of(aside) != arrow_schema(model):  # the model changed meanwhile: start again
            return state, STALE
        return state, read_state(aside)

    # -- a window -------------------------------------------------------------------------------

    def _stage_frame(self, frame: DataFrame, folder: str, load: WindowLoad) -> StagedWindow:
        target = self._target(load)[1]
        target.keys = None  # not read here: the table's keys are no longer known
        return self._staged(frame, None, folder, load, target.state)

    def _stage_arrow(self, batch: pa.Table, folder: None, load: WindowLoad) -> StagedWindow:
        return self._staged(None, batch, folder, load, self._target(load)[1].state)

    def _commit(self, window: StagedWindow | None, load: WindowLoad) -> WindowResult:
        """One commit: a MERGE from the staged files (read back ``Tuning.batch_rows`` rows at a
        time), or from memory (an append when its keys are known to be new), or the state alone."""
        model = load.model
        path, target = self._target(load)
        if window is None:  # no row: its state alone, in one (empty) commit
            return self._merge(path, target, None, Staged.empty(), load)
        staged, batch = window
        if batch is not None:
            append = self._new_keys(target, batch, model)
            return self._merge(path, target, batch if batch.num_rows else None, staged, load, append=append)
        source = None
        if staged.rows:
            batch_rows = self.tuning.batch_rows
            filesystem = staging_filesystem(self.options)
            source = (pads.dataset(staged.files, schema=arrow_schema(model), format="parquet",
                                   filesystem=filesystem)
                      .scanner(batch_size=batch_rows, batch_readahead=_BATCH_READAHEAD,
                               fragment_readahead=_FRAGMENT_READAHEAD,
                               # a row group at a time, not the whole file's column chunks
                               fragment_scan_options=pads.ParquetFragmentScanOptions(pre_buffer=False))
                      .to_reader())
        return self._merge(path, target, source, staged, load)

    def _target(self, load: WindowLoad) -> tuple[str, WindowTarget]:
        """The table a window commits to (the live one, or the refresh's built aside), opened
        once per model's transfer (see :class:`WindowTarget`)."""
        path = self.refresh_path(load.model) if load.into_refresh else self.table_path(load.model)
        target = self._tables.get(path)
        if target is None:
            table = self._open(path)
            target = self._tables[path] = WindowTarget(table, read_state(table),
                                                        None if table.file_uris() else set())
        return path, target

    # -- the full refresh's publish -------------------------------------------------------------

    def _refresh_state(self, model: ModelConfig) -> ModelState:
        self._tables.clear()  # opened again: what follows commits or replaces tables
        return read_state(self._open(self.refresh_path(model)))

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        """One overwrite commit of the live table with the aside table's rows and ``state``."""
        from deltalake import write_deltalake

        aside = self._open(self.refresh_path(model))
        path = self.table_path(model)
        changes_schema = not self._exists(path) or _schema_of(self._open(path)) != arrow_schema(model)
        rows = aside.to_pyarrow_dataset().scanner(columns=arrow_schema(model).names).to_reader()
        write_deltalake(path, rows, mode="overwrite", name=model.model_name, storage_options=self.options,
                        schema_mode="overwrite" if changes_schema else None,
                        commit_properties=_commit(state, transfer_id))
        self._remove(self.refresh_path(model))

    # -- outside a transfer's windows -------------------------------------------------------------

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        """Remove the rows whose primary key and last-modified value ``frame`` holds (a row that
        changed since is left alone): one MERGE commit per batch of ``Tuning.delete_batch_rows``
        rows brought from Spark one partition at a time (memory stays flat), each carrying the
        model's current state."""
        self._tables.clear()  # opened again: what follows commits or replaces tables
        columns = [c.destination_name for c in model.primary_key] + [model.last_modified.destination_name]
        match = " AND ".join(f"t.{backquoted(c)} = s.{backquoted(c)}" for c in columns)
        deleted = 0
        for batch in self._deleted_batches(frame, model):
            table = self._open(self.table_path(model))
            metrics = (table.merge(batch, predicate=match, source_alias="s", target_alias="t",
                                   commit_properties=_commit(read_state(table), transfer_id))
                       .when_matched_delete().execute())
            deleted += int(metrics.get("num_target_rows_deleted", 0))
        return deleted

    def has_table(self, model: ModelConfig) -> bool:
        """A Delta table with data files (Spark cannot read a Parquet scan of no files: an empty
        table counts as none)."""
        return self._exists(self.table_path(model)) and bool(self._current_files(model))

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        files = self._current_files(model)
        if not files:  # a table with no data files yet: Spark cannot read zero paths
            return empty_frame(spark, model)
        if self.s3 is not None:  # Spark has no S3 connector here: the table through delta-rs
            return spark.createDataFrame(self._open(self.table_path(model)).to_pyarrow_table())
        return spark.read.parquet(*files)

    # -- one transfer per model ----------------------------------------------------------------

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """Hold the model's lock file (an exclusive ``flock``, the operating system's: released
        when this writer closes, or when its process dies) so that two transfers of one model to
        this folder never interleave; a second one waits up to ``Tuning.lock_wait_seconds``, then is
        refused naming the first. The file says who holds it."""
        name = model.model_name
        lock = (ObjectLock(self.s3, self._key(LOCK_DIR, f"{name}.json"), transfer_id) if self.s3 is not None
                else FileLock(self.root / LOCK_DIR, name, transfer_id))  # a lock object (see storage/s3.py)
        self._locks.hold(name, lock, destination=self.name, wait_seconds=self.tuning.lock_wait_seconds)

    # -- test-connection ----------------------------------------------------------------------

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        """The folder (created for the probe if missing, then removed), then files written,
        renamed, read and deleted, and a folder created and removed, in the root, in the lock
        folder and in each existing table's folder and commit log: what a transfer does there."""
        from transfer_platform.probes import Probe

        probe = Probe(target)
        if self.s3 is not None:
            key = self._key(LOCK_DIR, f"_tp_probe_{uuid.uuid4().hex[:12]}")
            return probe_objects(probe, self.check, self.s3, key, self.root)
        with self._probe_root(probe, f"create folder {self.root}") as created:
            if created is None:
                probe.skipped([f"write, rename, read and delete files in {self.root}"], "no folder")
                return probe.checks
            probe.passed(f"create folder {self.root}", "it does not exist yet; the first transfer "
                                                       "creates it" if created else "it exists")
            folders = [self.root] + [p for p in (self.root / LOCK_DIR,) if p.is_dir()]
            for model in models:
                if self._exists(self.table_path(model)):
                    folders += [Path(self.table_path(model)), Path(self.table_path(model)) / "_delta_log"]
            for folder in folders:
                probe_folder(probe, folder)
        return probe.checks

    # -- full refresh and schema --------------------------------------------------------------

    def _begin_refresh(self, model: ModelConfig, live: ModelState) -> ModelState:
        from deltalake import DeltaTable

        state = ModelState(high_watermark=live.high_watermark)
        path = self.refresh_path(model)
        self._remove(path)
        DeltaTable.create(path, schema=arrow_schema(model), name=model.model_name, storage_options=self.options,
                          commit_properties=_commit(state, "begin-refresh"))
        return state

    def _plan_columns(self, model: ModelConfig) -> ColumnChanges:
        """A new live table with the model's columns; or what bringing the live table's to them
        would add and drop (a changed type refused; a drop refused unless the model allows it)."""
        from deltalake import DeltaTable

        path = self.table_path(model)
        if not self._exists(path):
            DeltaTable.create(path, schema=arrow_schema(model), name=model.model_name,
                              storage_options=self.options)
            return ColumnChanges((), ())
        existing = _schema_of(self._open(path))
        wanted = arrow_schema(model)
        for field in wanted:
            if field.name in existing.names and existing.field(field.name).type != field.type:
                raise SchemaMismatch(
                    f"model '{model.model_name}' -> destination '{self.name}': column '{field.name}' "
                    f"is {existing.field(field.name).type} in the Delta table but the model says "
                    f"{field.type}; a type is never changed in place. Fix: run a full refresh: "
                    f"transfer-platform transfer {self.name} --model {model.model_name} --full-refresh")
        planned = column_changes(existing.names, wanted.names)
        refuse_column_drops(model.model_name, self.name, f"Delta table {path}", planned.dropped,
                            allowed=model.allow_column_drop)
        return planned

    def _apply_columns(self, model: ModelConfig, planned: ColumnChanges, state: ModelState) -> tuple[str, ...]:
        """A column added by an empty ``schema_mode="merge"`` append; dropped ones by rewriting
        the table in one overwrite commit (delta-rs cannot drop a column in place)."""
        from deltalake import write_deltalake

        added, dropped = planned.added, planned.dropped
        if not (added or dropped):
            return ()
        table = self._open(self.table_path(model))
        wanted = arrow_schema(model)
        commit = _commit(state, "schema-evolution")
        if dropped:  # one overwrite commit with the model's columns (added ones NULL)
            rows = pa.RecordBatchReader.from_batches(wanted, _project(table, wanted))
            write_deltalake(table, rows, mode="overwrite", schema_mode="overwrite", commit_properties=commit)
        else:
            write_deltalake(table, wanted.empty_table(), mode="append", schema_mode="merge",
                            commit_properties=commit)
        return change_sentences(f"Delta table {model.model_name}", added, dropped)

    # -- steps --------------------------------------------------------------------------------

    def _merge(self, path: str, target: WindowTarget, source: pa.RecordBatchReader | pa.Table | None,
               staged: Staged, load: WindowLoad, *, append: bool = False) -> WindowResult:
        """One commit of ``source`` (the checked window, or ``None``: no row) into the target's
        table, with the model's new state (appended: its keys are known to be new). A failed
        commit makes the table be opened again."""
        from deltalake import write_deltalake

        model, table = load.model, target.table
        max_lm = None if staged.max_last_modified is None else model.change_column.moment(staged.max_last_modified)
        new_state = next_state(target.state, load, max_lm)
        commit = _commit(new_state, load.transfer_id)
        # kept: those newly marked; removed: counted by the MERGE below
        rows_deleted = 0 if model.removes_deleted_rows else staged.marked
        try:
            before = table.version()
            if append and isinstance(source, pa.Table):  # what the MERGE below does when no key matches
                if model.removes_deleted_rows:  # a delete of a row the table does not hold: nothing
                    source = source.filter(pc.invert(marked_mask(source, model)))
                write_deltalake(table, source, mode="append", commit_properties=commit)
            elif source is not None:
                join, newer = merge_predicates(model)
                merge = table.merge(source, predicate=join, source_alias="s", target_alias="t",
                                    commit_properties=commit,
                                    streamed_exec=isinstance(source, pa.RecordBatchReader))
                deleted = None
                if model.removes_deleted_rows:  # removed where the delete is not older; never inserted
                    marker = model.deletion_marker
                    deleted = marked_deleted(marker.destination_name, marker.data_type, "s").replace('"', "`")
                    lm = backquoted(model.last_modified.destination_name)
                    merge = merge.when_matched_delete(predicate=f"{deleted} AND s.{lm} >= t.{lm}")
                    newer = f"NOT ({deleted}) AND ({newer})"
                if not model.is_append_only:  # append-only: a key already delivered is skipped
                    merge = merge.when_matched_update_all(predicate=newer)
                metrics = merge.when_not_matched_insert_all(
                    predicate=None if deleted is None else f"NOT ({deleted})").execute()
                if model.removes_deleted_rows:
                    rows_deleted = int(metrics.get("num_target_rows_deleted", 0))
            if table.version() == before:  # nothing changed: record the state in an empty commit
                write_deltalake(table, arrow_schema(model).empty_table(), mode="append", commit_properties=commit)
        except BaseException:
            self._tables.pop(path, None)
            raise
        target.state = new_state
        return WindowResult(staged.rows, staged.delta_rows, staged.volume, max_lm, new_state, rows_deleted)

    def _current_files(self, model: ModelConfig) -> list[str]:
        return self._open(self.table_path(model)).file_uris()


def _commit(state: ModelState, transfer_id: str):  # -> CommitProperties
    from deltalake import CommitProperties

    return CommitProperties(custom_metadata={STATE_KEY: state.to_json(), TRANSFER_KEY: transfer_id})


def _schema_of(table: DeltaTable) -> pa.Schema:
    """The table's schema, timestamps as the model writes them (UTC microseconds)."""
    fields = []
    for field in pa.schema(table.schema().to_arrow()):
        kind = pa.timestamp("us", tz="UTC") if pa.types.is_timestamp(field.type) else field.type
        fields.append(pa.field(field.name, kind))
    return pa.schema(fields)


def _project(table: DeltaTable, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The table's rows with ``schema``'s columns: columns it lacks come as NULLs."""
    present = [name for name in schema.names if name in _schema_of(table).names]
    dataset = table.to_pyarrow_dataset()  # here, not inside delta-rs's writer (its own runtime)
    return (conformed(batch, schema) for batch in dataset.to_batches(columns=present))


def read_state(table: DeltaTable) -> ModelState:
    """The state recorded by the newest commit of ours (other writers' commits carry none)."""
    limit = _HISTORY_PAGE
    while True:
        history = table.history(limit)
        for entry in history:
            if STATE_KEY in entry:
                return ModelState.from_json(entry[STATE_KEY])
        if len(history) < limit:
            return ModelState()
        limit *= 10
