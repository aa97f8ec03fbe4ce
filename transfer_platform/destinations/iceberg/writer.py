"""Apache Iceberg destination: one table per model in the recipient's namespace of a SQL catalog
(PostgreSQL), its files in a warehouse folder or bucket, written with pyiceberg from Arrow (Spark
cannot load Iceberg's runtime here).

Every commit is one snapshot, copy-on-write, with the model's state in the snapshot's summary
(``transfer-platform.state``), so rows and watermark commit together (one catalog commit: the
table's metadata pointer swapped in ``iceberg_tables``) and a reader of the current snapshot sees
exactly the live rows in its data files (no delete files). Per window:

- the window is staged (a large one by Spark's executors as Parquet under the warehouse's
  ``_tp_staging/<namespace>/<model>/``, as for Delta; a small one is already here as Arrow) and
  refused for a NULL key, a NULL last-modified value or a key twice, before any commit;
- into a table empty when the transfer first committed to it, whose keys the window cannot hold
  (a backfill, a refresh): one *append* snapshot;
- otherwise one *overwrite* snapshot: the data files that may hold the window's keys (Iceberg's
  column statistics on the first key column) are read, the window merged with their rows in
  Arrow (:mod:`.merge`: never an older version over a newer one; soft deletes removed), and those
  files replaced by the result; a window that changes nothing writes no file (a snapshot with the
  state alone, as an empty window's).

A full refresh loads a table aside (``_tp_refresh_<model>``) and is published by one overwrite
snapshot of the live table (every data file replaced by the refresh's rows; its columns changed in
the same commit), so a reader sees the old rows until then. Schema evolution is Iceberg's own
(``update_schema``): columns added; dropped only with ``allow_column_drop`` (or by a refresh); a
changed type or primary key (recorded in the table property ``transfer-platform.primary-key``) is
refused with ``SchemaMismatch``. The delete sweep rewrites the files holding the keys it removes.

One transfer per model at a time: a session advisory lock on the catalog's database
(:mod:`.catalog`); the catalog's own optimistic commit (the metadata pointer compared on update)
stays as the second line.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from transfer_platform.config.connection_settings import S3Connection
from transfer_platform.config.models import ModelConfig
from transfer_platform.core.columns import (
    ColumnChanges,
    change_sentences,
    column_changes,
    refuse_column_drops,
)
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import (
    WindowLoad,
    WindowResult,
    arrow_schema,
    empty_frame,
    marked_mask,
)
from transfer_platform.destinations.iceberg.catalog import Catalog
from transfer_platform.destinations.iceberg.merge import merge_rows, without_versions
from transfer_platform.destinations.skeleton import STALE, next_state
from transfer_platform.destinations.staged_files import (
    Staged,
    StagedFilesWriter,
    StagedWindow,
    WindowTarget,
    staging_filesystem,
)
from transfer_platform.errors import SchemaMismatch
from transfer_platform.storage.s3 import S3Store, storage_options
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.iceberg import IcebergDestination

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.destinations.skeleton import Stale
    from transfer_platform.probes import Check

STATE_KEY = "transfer-platform.state"
TRANSFER_KEY = "transfer-platform.transfer-id"
KEY_PROPERTY = "transfer-platform.primary-key"
REFRESH_PREFIX = "_tp_refresh_"


class IcebergWriter(StagedFilesWriter):
    def __init__(self, destination: IcebergDestination, tuning: Tuning = DEFAULT) -> None:
        super().__init__(destination, tuning)
        connection = destination.connection
        self.namespace = self.staging_scope = destination.namespace
        owner = f"destination '{destination.name}'"
        warehouse = connection.warehouse
        if isinstance(warehouse, S3Connection):
            self.s3: S3Store | None = S3Store(warehouse, owner)
            self.prefix = warehouse.prefix.strip("/")
            self.root = f"s3://{warehouse.bucket}" + (f"/{self.prefix}" if self.prefix else "")
            self.options: dict[str, str] | None = storage_options(warehouse, owner)
            keys = warehouse.credentials(owner, ("s3.access-key-id", "s3.secret-access-key"))
            file_io = {"s3.region": warehouse.region, **keys,
                       "s3.force-virtual-addressing": str(not warehouse.path_style).lower()}
            if warehouse.endpoint_url:
                file_io["s3.endpoint"] = warehouse.endpoint_url
            location = self.root
        else:
            self.s3, self.options, self.prefix = None, None, ""
            self.root = str(Path(warehouse.path).resolve())
            file_io, location = {}, Path(self.root).as_uri()
        c = connection.catalog
        self.catalog = Catalog(c, connection.catalog_name, f"Iceberg catalog '{connection.catalog_name}' of "
                               f"destination '{destination.name}' (PostgreSQL database {c.database})",
                               file_io, location)
        self._targets: dict[str, WindowTarget] = {}

    def close(self) -> None:
        self._targets.clear()
        self.catalog.close()

    def __del__(self) -> None:
        if getattr(self, "catalog", None) is not None:
            self.catalog.close()

    def check(self) -> None:
        self._check_root(f"Iceberg warehouse of destination '{self.name}'", "connection.warehouse.path")
        self.catalog.open(create=True)

    # -- names and tables -------------------------------------------------------------------------

    def identifier(self, model: ModelConfig, *, aside: bool = False) -> str:
        return f"{self.namespace}.{REFRESH_PREFIX if aside else ''}{model.model_name}"

    def _load(self, identifier: str, *, create: bool = False) -> Table | None:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        catalog = self.catalog.open(create=create)
        if catalog is None:
            return None
        with self.catalog.errors():
            try:
                return catalog.load_table(identifier)
            except (NoSuchTableError, NoSuchNamespaceError):
                return None

    def _create(self, model: ModelConfig, identifier: str) -> Table:
        with self.catalog.errors():
            catalog = self.catalog.open(create=True)
            catalog.create_namespace_if_not_exists(self.namespace)
            return catalog.create_table(identifier, schema=arrow_schema(model), properties={
                KEY_PROPERTY: ",".join(c.destination_name for c in model.primary_key)})

    def _drop(self, identifier: str) -> None:
        table = self._load(identifier, create=True)
        if table is None:
            return
        with self.catalog.errors():
            self.catalog.open(create=True).drop_table(identifier)
        self._remove(table.location())

    # -- prepare's primitives ---------------------------------------------------------------------

    def _reach(self) -> None:
        self._targets.clear()
        self.check()

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        self.catalog.lock(self.namespace, model.model_name, transfer_id, destination=self.name,
                          wait_seconds=self.tuning.lock_wait_seconds)

    def _read_states(self, model: ModelConfig) -> tuple[ModelState, ModelState | Stale | None]:
        live = self._load(self.identifier(model))
        state = read_state(live) if live is not None else ModelState()
        aside = self._load(self.identifier(model, aside=True))
        if aside is None:
            return state, None
        if _columns(aside) != self._wanted(model) or aside.properties.get(KEY_PROPERTY) != _key_text(model):
            return state, STALE
        return state, read_state(aside)

    def _begin_refresh(self, model: ModelConfig, live: ModelState) -> ModelState:
        state = ModelState(high_watermark=live.high_watermark)
        identifier = self.identifier(model, aside=True)
        self._drop(identifier)
        table = self._create(model, identifier)
        with self.catalog.errors():
            table.append(arrow_schema(model).empty_table(), snapshot_properties=_properties(state, "begin-refresh"))
        return state

    def _plan_columns(self, model: ModelConfig) -> ColumnChanges:
        identifier = self.identifier(model)
        table = self._load(identifier, create=True)
        if table is None:
            self._create(model, identifier)
            return ColumnChanges((), ())
        existing, wanted = _columns(table), self._wanted(model)
        fix = (f"run a full refresh: transfer-platform transfer {self.name} --model {model.model_name} "
               "--full-refresh")
        for name, kind in wanted.items():
            if name in existing and existing[name] != kind:
                raise SchemaMismatch(
                    f"model '{model.model_name}' -> destination '{self.name}': column '{name}' is "
                    f"{existing[name]} in Iceberg table {identifier} but the model says {kind}; a type "
                    f"is never changed in place. Fix: {fix}")
        held_key = table.properties.get(KEY_PROPERTY)
        if held_key is not None and held_key != _key_text(model):
            raise SchemaMismatch(
                f"model '{model.model_name}' -> destination '{self.name}': Iceberg table {identifier} is keyed "
                f"on ({held_key}) but the model's primary key is ({_key_text(model)}); a key is never "
                f"changed in place. Fix: {fix}")
        planned = column_changes(list(existing), list(wanted))
        refuse_column_drops(model.model_name, self.name, f"Iceberg table {identifier}", planned.dropped,
                            allowed=model.allow_column_drop)
        return planned

    def _apply_columns(self, model: ModelConfig, planned: ColumnChanges, state: ModelState) -> tuple[str, ...]:
        if not (planned.added or planned.dropped):
            return ()
        table = self._load(self.identifier(model), create=True)
        with self.catalog.errors(), table.update_schema(allow_incompatible_changes=bool(planned.dropped)) as update:
            update.union_by_name(arrow_schema(model))
            for name in planned.dropped:
                update.delete_column(name)
        return change_sentences(f"Iceberg table {self.identifier(model)}", planned.added, planned.dropped)

    def _wanted(self, model: ModelConfig) -> dict[str, str]:
        types = self.destination.vendor_record.column_types
        return {c.destination_name: types[c.data_type] for c in model.columns}

    # -- a window -----------------------------------------------------------------------------------

    def _stage_frame(self, frame: DataFrame, folder: str, load: WindowLoad) -> StagedWindow:
        return self._staged(frame, None, folder, load, self._target(load).state)

    def _stage_arrow(self, batch: pa.Table, folder: None, load: WindowLoad) -> StagedWindow:
        return self._staged(None, batch, folder, load, self._target(load).state)

    def _target(self, load: WindowLoad) -> WindowTarget:
        """The table a window commits to (the live one, or the refresh's built aside), opened
        once per model's transfer."""
        identifier = self.identifier(load.model, aside=load.into_refresh)
        if identifier not in self._targets:
            table = self._load(identifier, create=True)
            snapshot = table.current_snapshot()
            empty = snapshot is None or int(snapshot.summary.get("total-records", "0") or 0) == 0
            self._targets[identifier] = WindowTarget(table, read_state(table), set() if empty else None)
        return self._targets[identifier]

    def _commit(self, window: StagedWindow | None, load: WindowLoad) -> WindowResult:
        model = load.model
        identifier = self.identifier(model, aside=load.into_refresh)
        target = self._target(load)
        staged, rows = window if window is not None else (Staged.empty(), None)
        if rows is None and staged.rows:
            rows = (pads.dataset(staged.files, schema=arrow_schema(model), format="parquet",
                                 filesystem=staging_filesystem(self.options)).to_table())
        max_lm = None if staged.max_last_modified is None else model.change_column.moment(staged.max_last_modified)
        new_state = next_state(target.state, load, max_lm)
        properties = _properties(new_state, load.transfer_id)
        removed = 0 if model.removes_deleted_rows else staged.marked
        try:
            with self.catalog.errors():
                if rows is None or not rows.num_rows:
                    _state_only(target.table, properties)
                elif self._new_keys(target, rows, model):
                    if model.removes_deleted_rows:
                        rows = rows.filter(pc.invert(marked_mask(rows, model)))
                    target.table.append(rows, snapshot_properties=properties)
                else:
                    deleted = _rewrite(target.table, rows, model, properties,
                                       lambda held: merge_rows(held, rows, model))
                    removed = deleted if model.removes_deleted_rows else removed
        except BaseException:
            self._targets.pop(identifier, None)
            raise
        target.state = new_state
        return WindowResult(staged.rows, staged.delta_rows, staged.volume, max_lm, new_state, removed)

    # -- the full refresh's publish ---------------------------------------------------------------

    def _refresh_state(self, model: ModelConfig) -> ModelState:
        self._targets.clear()
        return read_state(self._load(self.identifier(model, aside=True), create=True))

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        """One overwrite snapshot of the live table: every data file replaced by the refresh's rows,
        its columns (and key) brought to the model's in the same commit."""

        identifier = self.identifier(model)
        aside = self._load(self.identifier(model, aside=True), create=True)
        live = self._load(identifier, create=True) or self._create(model, identifier)
        wanted = self._wanted(model)
        with self.catalog.errors():
            tx = live.transaction()
            existing = _columns(live)
            gone = [n for n, kind in existing.items() if wanted.get(n) != kind]
            if gone:
                with tx.update_schema(allow_incompatible_changes=True) as update:
                    for name in gone:
                        update.delete_column(name)
            if gone or set(wanted) - set(existing):
                with tx.update_schema() as update:
                    update.union_by_name(arrow_schema(model))
            tx.set_properties({KEY_PROPERTY: _key_text(model)})
            names = [f.name for f in tx.table_metadata.schema().fields]
            rows = aside.scan().to_arrow().select(names)
            old_files = [task.file for task in live.scan().plan_files()]
            _replace_files(tx, live.io, _properties(state, transfer_id), old_files, rows)
        self._drop(self.identifier(model, aside=True))

    # -- outside a transfer's windows ---------------------------------------------------------------

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        """Remove the rows whose key and last-modified value ``frame`` holds (a row changed since
        stays): one overwrite snapshot per ``Tuning.delete_batch_rows`` rows, carrying the state."""
        self._targets.clear()
        removed = 0
        for gone in self._deleted_batches(frame, model):
            table = self._load(self.identifier(model), create=True)
            with self.catalog.errors():
                removed += _rewrite(table, gone, model, _properties(read_state(table), transfer_id),
                                    lambda held, gone=gone: without_versions(held, gone, model), state_only=False)
        return removed

    def has_table(self, model: ModelConfig) -> bool:
        return self._load(self.identifier(model)) is not None

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        table = self._load(self.identifier(model))
        rows = None if table is None else table.scan().to_arrow()
        if rows is None or not rows.num_rows:
            return empty_frame(spark, model)
        schema = arrow_schema(model)
        return spark.createDataFrame(rows.select(schema.names).cast(schema))

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        from transfer_platform.destinations.iceberg.probe import probe

        return probe(self, models, target)


# -- snapshots --------------------------------------------------------------------------------------


def _properties(state: ModelState, transfer_id: str) -> dict[str, str]:
    return {STATE_KEY: state.to_json(), TRANSFER_KEY: transfer_id}


def read_state(table: Table) -> ModelState:
    """The state in the newest snapshot of ours, from the current one back (others carry none)."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        value = snapshot.summary.additional_properties.get(STATE_KEY) if snapshot.summary else None
        if value is not None:
            return ModelState.from_json(value)
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else table.snapshot_by_id(parent)
    return ModelState()


def _state_only(table: Table, properties: dict[str, str]) -> None:
    """A snapshot that adds and removes nothing: the state alone."""
    tx = table.transaction()
    with tx.update_snapshot(snapshot_properties=properties).fast_append():
        pass
    tx.commit_transaction()


def _rewrite(table: Table, window: pa.Table, model: ModelConfig, properties: dict[str, str], change: Any,
             *, state_only: bool = True) -> int:
    """One overwrite snapshot: the data files holding the first key column's values of ``window``
    read, their rows of those values given to ``change`` (-> ``Merged``), the files replaced by
    the rows kept and the merged ones. Nothing changed: a snapshot of the state alone (or none)."""
    from pyiceberg.expressions import AlwaysTrue, In
    from pyiceberg.io.pyarrow import ArrowScan

    schema = arrow_schema(model)
    first = model.primary_key[0].destination_name
    values = pc.unique(window.column(first).combine_chunks())
    touched, held, kept = [], [], []
    for task in table.scan(row_filter=In(first, set(values.to_pylist()))).plan_files():
        rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table([task])
        rows = rows.select(schema.names).cast(schema)
        inside = pc.is_in(rows.column(first), value_set=values)
        if pc.any(inside).as_py():
            touched.append(task.file)
            held.append(rows.filter(inside))
            kept.append(rows.filter(pc.invert(inside)))
    merged = change(pa.concat_tables(held) if held else schema.empty_table())
    if not merged.changed:
        if state_only:
            _state_only(table, properties)
        return 0
    tx = table.transaction()
    names = [f.name for f in tx.table_metadata.schema().fields]
    data = pa.concat_tables([*kept, merged.rows]).select(names)
    _replace_files(tx, table.io, properties, touched, data)
    return merged.removed


def _columns(table: Table) -> dict[str, str]:
    """The table's columns and their Iceberg type names."""
    return {f.name: str(f.field_type) for f in table.schema().fields}


def _key_text(model: ModelConfig) -> str:
    return ",".join(c.destination_name for c in model.primary_key)


def _replace_files(tx, io, properties: dict[str, str], old_files: list, rows: pa.Table) -> None:
    """In ``tx`` (a pyiceberg transaction): one overwrite snapshot (with ``properties`` in its
    summary) that removes ``old_files`` and adds ``rows`` as new data files; then commit."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    with tx.update_snapshot(snapshot_properties=properties).overwrite() as snapshot:
        for data_file in old_files:
            snapshot.delete_data_file(data_file)
        if rows.num_rows:
            for data_file in _dataframe_to_data_files(tx.table_metadata, rows, io, write_uuid=snapshot.commit_uuid):
                snapshot.append_data_file(data_file)
    tx.commit_transaction()
