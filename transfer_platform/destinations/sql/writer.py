"""The SQL destinations' algorithm, written once: :class:`SqlWriter`.

It fills the primitives of ``destinations/skeleton.py`` for any database that speaks SQL, with the
statements of the vendor's :class:`~.dialect.Dialect` run through its :class:`~.session.Session`:
the status table (``_transfer_status``: a row per model, its state and an unfinished full
refresh's; or the other state store its vendor record chooses, :mod:`.state`), the live table's
columns planned and changed (every refusal from ``core/columns.py``), a window's staging table
loaded by the vendor's bulk path, scanned once and refused by name (a NULL key or last-modified
value, a key twice), then **one commit** of its soft deletes, its rows merged on the key with the
last-modified tie-break and its new state; a full refresh built aside and
published by replacing the live table (in one transaction, or, without transactional DDL, by one
atomic rename between two commits: ``published_state`` is written first and a transfer dying
between them is finished by the next); the delete sweep, ``has_table``. ``docs/design.md``
(*Adding a vendor*) walks through a new one.

A vendor writes the rest: its connection and session, its model lock, its bulk load, what its
``probe`` tries (:meth:`SqlWriter._probe_plan`), its errors' translation; it overrides a step only
where its engine does better (DuckDB's staging in place, a ``read_table`` through Spark's JDBC).

**A window into an empty table** is loaded by the strategy its vendor record declares
(``Vendor.empty_table_load``: swap, create-and-rename, clone-and-exchange, copy into), run here by
one path (:meth:`SqlWriter._create_staging`, :meth:`SqlWriter._load_into_empty`): the staging
table marked ``into_empty`` when the table is empty and the vendor's :meth:`_start_empty_load`
finds the strategy fits, its rows marked deleted left out at the commit (an empty table holds
nothing they would remove), then published by the vendor's :meth:`_publish_empty_load`; a table
that got rows meanwhile is merged into, as any window is.

**The one hook of a commit**, :meth:`SqlWriter._atomically`: the window's rows, its soft deletes and
its new state become visible together or not at all. By default they are one transaction of the
session. An engine without multi-statement transactions overrides this hook alone, and says there
how its window still becomes visible at once (for example: rows written under a version no reader
selects until the state row naming that version is written last, in one statement).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar

from transfer_platform.core.columns import ColumnChanges, change_sentences, plan_columns
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import (
    WindowLoad,
    WindowResult,
    arrow_schema,
    duplicate_key_error,
    empty_frame,
    null_key_error,
    null_last_modified_error,
    staging_suffix,
)
from transfer_platform.destinations.skeleton import STALE, Writer, next_state
from transfer_platform.destinations.sql import rename_publish
from transfer_platform.destinations.sql.dialect import (
    OLD_PREFIX,
    REFRESH_PREFIX,
    STAGING_PREFIX,
    STATUS_TABLE,
    Dialect,
)
from transfer_platform.destinations.sql.state import STATE_STORES
from transfer_platform.phases import log_phase
from transfer_platform.probes import Probe
from transfer_platform.storage.locks import Locks
from transfer_platform.vendors import DESTINATIONS

if TYPE_CHECKING:
    from datetime import datetime

    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.config.models import ColumnConfig, ModelConfig
    from transfer_platform.destinations.skeleton import Stale
    from transfer_platform.destinations.sql.session import Session
    from transfer_platform.probes import Check, ProbePlan
    from transfer_platform.tuning import Tuning


@dataclass
class StagingTable:
    """A window's staging table, the table it is merged into, and what its scan found."""

    name: str  # in the destination's schema or database
    table: str  # qualified (or, for an engine that stages elsewhere, the relation to read)
    target_name: str  # the live table, or the refresh's built aside
    target: str  # qualified
    into_empty: bool = False  # loaded by the vendor's empty-table load (its target was empty)
    rows: int = 0
    delta_rows: int = 0
    max_last_modified: datetime | None = None
    volume: int = 0  # bytes: the scan's or the catalog's, else what the bulk load counted
    marked: int = 0
    duplicates_refused: bool = False  # the duplicate-key check already ran
    held: pa.Table | None = None  # the window held in this process as Arrow instead (ClickHouse's empty-table load)


#: the empty-table loads whose loaded table's own key refuses a key twice (built at the swap, or
#: declared by the new table): the scan leaves that check to it
KEYED_LOADS = frozenset({"swap", "create-and-rename"})


class SqlWriter(Writer, abstract=True):
    """A SQL destination's writer: the algorithm here, the statements in ``DIALECT``."""

    DIALECT: ClassVar[Dialect]

    def __init__(self, destination: Any, tuning: Tuning, *, container: str, what: str) -> None:
        super().__init__(destination, tuning)
        self.dialect = self.DIALECT
        #: the recipient's schema (PostgreSQL, DuckDB) or database (MySQL) holding every table
        self.container = container
        #: how messages name the destination ("PostgreSQL destination 'acme_pg'")
        self.what = what
        #: where each model's state is kept: the store the vendor record chooses
        self.states = STATE_STORES[DESTINATIONS[self.dialect.vendor].state_store or "status row"](self)
        #: the driver's connection or client (opened on first use), and the models' locks held
        self._conn: Any = None
        self._locked = Locks()

    #: the models' locks end with the session (advisory locks, ``GET_LOCK``): closing it releases them
    LOCKS_END_WITH_SESSION: ClassVar[bool] = False

    def close(self) -> None:
        """Release the models' locks (one not released now expires), then the connection."""
        if self._conn is not None:
            if not self.LOCKS_END_WITH_SESSION:
                self._locked.release_all()
            with suppress(Exception):  # already gone: what it held went with it
                self._conn.close()
            self._conn = None
        self._locked.clear()

    # -- what the vendor provides ----------------------------------------------------------------

    @property
    def session(self) -> Session:
        """The writer's session (connected on first use, held until ``close``)."""
        raise NotImplementedError

    def _translated_errors(self) -> AbstractContextManager[None]:
        """What the driver raises, as the platform's errors naming the fix (a grant, a setting)."""
        return nullcontext()

    def _preparing(self) -> AbstractContextManager[None]:  # pyright: ignore[reportIncompatibleMethodOverride]
        """Around ``prepare``: the driver's errors translated (the default of every SQL vendor)."""
        return self._translated_errors()

    def check(self) -> None:
        """Reach the database: one trivial query, its failure translated."""
        with self._translated_errors():
            self.session.one("SELECT 1")

    def _load_frame(self, frame: DataFrame, staging: str, model: ModelConfig) -> None:
        """The bulk load: Spark's executors write ``frame`` into the staging table ``staging``."""
        raise NotImplementedError

    def _load_arrow(self, batch: pa.Table, staging: str, load: WindowLoad) -> None:
        """The bulk load of rows already in this process."""
        raise NotImplementedError

    def _refuse_values(self, load: WindowLoad, staging: StagingTable) -> None:
        """Refuse, by name, a staged value the engine cannot hold (nothing by default)."""

    def _rows_refused(self, load: WindowLoad) -> AbstractContextManager[None]:
        """Around a window's commit: what the engine raises when it refuses the window's rows
        there, as a ``DataError`` naming the fix (nothing by default: the scan refused them)."""
        return nullcontext()

    # -- the empty-table load's steps (where the vendor record declares one) ----------------------

    @property
    def empty_table_load(self) -> str | None:
        """How a window into an empty table is loaded (the vendor record's; ``None``: merged)."""
        return DESTINATIONS[self.dialect.vendor].empty_table_load

    def _start_empty_load(self, load: WindowLoad, staging: StagingTable) -> bool:
        """The table is empty: prepare what the strategy loads into (a table, a transaction),
        or say it does not fit (False: the window is staged and merged; whatever this made is
        dropped with the staging table)."""
        return True

    def _still_empty(self, staging: StagingTable) -> bool:
        """At the commit: the table is still empty (False: the window is merged into it)."""
        return True

    def _leave_out_marked(self, staging: StagingTable, load: WindowLoad) -> None:
        """The loaded rows marked deleted removed before they are published (never delivered)."""
        marker = load.model.deletion_marker
        assert marker is not None  # called only for a model that removes the rows it marks deleted
        self.session.execute(self.dialect.delete_where(
            staging.table, self.dialect.marked(marker.destination_name, marker.data_type)))

    def _publish_empty_load(self, staging: StagingTable, load: WindowLoad) -> ModelState | None:
        """The loaded window made the table, with its new state (returned); ``None``, nothing
        changed, if the table can no longer be replaced (the window is merged into it)."""
        raise NotImplementedError

    # -- the one hook of a commit ----------------------------------------------------------------

    def _atomically(self, load: WindowLoad | None = None) -> AbstractContextManager[None]:
        """Around a window's commit (and a refresh's publish where DDL is transactional): what
        makes its rows, soft deletes and state visible together or not at all. One transaction of
        the session by default; see the module's docstring for an engine without one."""
        return self.session.transaction()

    # -- names -----------------------------------------------------------------------------------

    def table(self, model: ModelConfig) -> str:
        return self.dialect.qualified(self.container, model.model_name)

    def refresh_table_name(self, model: ModelConfig) -> str:
        return REFRESH_PREFIX + staging_suffix(model.model_name, "").rstrip("_")

    def refresh_table(self, model: ModelConfig) -> str:
        return self.dialect.qualified(self.container, self.refresh_table_name(model))

    def old_table_name(self, model: ModelConfig) -> str:
        return OLD_PREFIX + staging_suffix(model.model_name, "").rstrip("_")

    def staging_table_name(self, model: ModelConfig, transfer_id: str) -> str:
        return STAGING_PREFIX + staging_suffix(model.model_name, transfer_id)

    @property
    def status_table(self) -> str:
        return self.dialect.qualified(self.container, STATUS_TABLE)

    # -- the catalog -----------------------------------------------------------------------------

    def _exists(self, name: str) -> bool:
        row = self.session.one(self.dialect.table_exists(self.container, name))
        return bool(row and row[0])

    def _has_rows(self, table: str) -> bool:
        return bool(self.session.one(self.dialect.has_rows(table))[0])  # pyright: ignore[reportOptionalSubscript]

    def _columns(self, name: str) -> dict[str, str]:
        """Column name -> type as the catalog names it; empty if the table does not exist."""
        return dict(self.session.all(self.dialect.columns(self.container, name)))

    def _primary_key(self, name: str, model: ModelConfig) -> list[str]:
        """The key of table ``name`` (of ``model``: a vendor whose catalog keeps none answers from it)."""
        return [row[0] for row in self.session.all(self.dialect.primary_key(self.container, name))]

    def _tables_starting_with(self, prefix: str) -> list[str]:
        return [name for (name,) in self.session.all(self.dialect.tables_starting_with(self.container, prefix))]

    def _columns_match(self, model: ModelConfig, name: str) -> bool:
        existing = self._columns(name)
        dialect = self.dialect
        return (set(existing) == {c.destination_name for c in model.columns}
                and all(dialect.matches(dialect.column_type(c), existing[c.destination_name]) for c in model.columns)
                and self._primary_key(name, model) == sorted(c.destination_name for c in model.primary_key))

    # -- prepare's primitives ----------------------------------------------------------------------

    def _reach(self) -> None:
        """The schema (where the vendor creates it) and ``_transfer_status``, created if missing."""
        with self._translated_errors():
            self._create_container()
            self.session.execute(self.dialect.status_ddl(self.status_table))

    def _create_container(self) -> None:
        """The recipient's schema, created if missing (nothing by default: it must exist)."""

    def _clean_staging(self, model: ModelConfig) -> None:
        """Under the model's lock: a dead transfer's staging tables (and a publish's old table)
        dropped, a publish it left half done finished (``rename_publish.finish_publish``)."""
        prefixes = [STAGING_PREFIX + staging_suffix(model.model_name, "")]
        if not self.dialect.transactional_ddl:
            prefixes.append(self.old_table_name(model))
        with self._translated_errors():
            for prefix in prefixes:
                for name in self._tables_starting_with(prefix):
                    self.session.execute(self.dialect.drop_table(self.dialect.qualified(self.container, name)))
                    log_phase("clean up", transfer_id="(a dead transfer)", destination=self.name,
                              model=model.model_name, staging_table=name, left_by_a_dead_transfer=True)
            if not self.dialect.transactional_ddl:
                rename_publish.finish_publish(self, model)

    def _status_row(self, model: ModelConfig) -> tuple | None:
        """(state, refresh_state, published_state) of the model, as text; ``None`` if no row."""
        return self.states.row(model)

    def _read_states(self, model: ModelConfig) -> tuple[ModelState, ModelState | Stale | None]:
        """The model's state and its unfinished refresh's; no ``_transfer_status`` (checked without
        creating anything) means nothing was ever committed."""
        with self._translated_errors():
            if not self._exists(STATUS_TABLE):
                return ModelState(), None
            row = self._status_row(model)
            if row is None:
                return ModelState(), None
            state, refresh, published = row
            if published is not None and not self._exists(self.refresh_table_name(model)):
                return ModelState.from_json(published), None  # published, its state not yet recorded
            if refresh is None:
                return ModelState.from_json(state), None
            if not self._columns_match(model, self.refresh_table_name(model)):
                return ModelState.from_json(state), STALE  # the model changed meanwhile: it starts again
            return ModelState.from_json(state), ModelState.from_json(refresh)

    def _begin_refresh(self, model: ModelConfig, live: ModelState) -> ModelState:
        """A new, empty table aside; progress starts over (the live high watermark kept as the
        reference of ``delta_rows_transferred``), the old forgotten first: no state points at a table
        emptied, even on a session that commits each statement alone (BigQuery's)."""
        state = ModelState(high_watermark=live.high_watermark)
        aside = self.refresh_table(model)
        ddl = [self.dialect.drop_table(aside), self.dialect.target_ddl(aside, model)]
        with self._translated_errors():
            if not self.dialect.transactional_ddl:
                rename_publish.begin_refresh(self, model, ddl, state)
                return state
            with self.session.transaction():
                self._ensure_status_row(model)
                self._set_state(model, "refresh_state", None)
                for statement in ddl:
                    self.session.execute(statement)
                self._set_state(model, "refresh_state", state)
        return state

    def _plan_columns(self, model: ModelConfig) -> ColumnChanges:
        """The live table created if missing; its columns compared with the model's: a changed
        type or primary key refused, a drop refused unless the model allows it."""
        table = self.table(model)
        with self._translated_errors():
            self.session.execute(self.dialect.target_ddl(table, model))
            existing = self._columns(model.model_name)
            actual_key = self._primary_key(model.model_name, model)
        return plan_columns(model, self.name, self._table_label(table), existing, actual_key,
                            self.dialect.column_type, matches=self.dialect.matches)

    def _table_label(self, table: str) -> str:
        """How refusals name a table (the file it is in, say)."""
        return table

    def _apply_columns(self, model: ModelConfig, planned: ColumnChanges, state: ModelState) -> tuple[str, ...]:
        """Bring the live table's columns to the model's, in one transaction."""
        if not (planned.added or planned.dropped):
            return ()
        table = self.table(model)
        added = [c for c in model.columns if c.destination_name in planned.added]
        with self._translated_errors(), self.session.transaction():
            for statement in self.dialect.alter_columns(table, added, planned.dropped):
                self.session.execute(statement)
        return change_sentences(table, [f"{c.destination_name} ({c.data_type})" for c in added], planned.dropped)

    # -- the status table ------------------------------------------------------------------------

    def _ensure_status_row(self, model: ModelConfig) -> None:
        self.states.ensure(model)

    def read_state(self, model: ModelConfig, column: str = "state") -> ModelState:
        return self.states.read(model, column)

    def _lock_state(self, model: ModelConfig, column: str) -> ModelState:
        """The model's state, kept from other writers until the commit ends."""
        return self.states.lock(model, column)

    def _record_state(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        self.states.record(model, state, transfer_id)

    def _set_state(self, model: ModelConfig, column: str, state: ModelState | None) -> None:
        self.states.set(model, column, state)

    # -- a window ----------------------------------------------------------------------------------

    def _create_staging(self, load: WindowLoad, *, in_memory: bool) -> StagingTable:
        """The window's staging table; or, into an empty table where the vendor declares an
        empty-table load that fits, what that load writes into (``into_empty``)."""
        staging = self._staging_for(load)
        if self.empty_table_load is not None:
            with self._translated_errors():
                staging.into_empty = not self._has_rows(staging.target) and self._start_empty_load(load, staging)
            if staging.into_empty:
                return staging
        self._create_staging_table(staging, load.model, None, logged=False)
        return staging

    def _staging_for(self, load: WindowLoad, kind: type[StagingTable] = StagingTable) -> StagingTable:
        """The window's staging table (not yet created) and its target: the live table, or the
        refresh's built aside."""
        model = load.model
        target_name = self.refresh_table_name(model) if load.into_refresh else model.model_name
        name = self.staging_table_name(model, load.transfer_id)
        return kind(name, self.dialect.qualified(self.container, name), target_name,
                    self.dialect.qualified(self.container, target_name))

    def _create_staging_table(self, staging: StagingTable, model: ModelConfig, columns: list[ColumnConfig] | None, *,
                              logged: bool) -> None:
        with self._translated_errors():
            self.session.execute(self.dialect.drop_table(staging.table))
            self.session.execute(self.dialect.staging_ddl(staging.table, staging.target, model, columns, logged=logged))

    def _stage_frame(self, frame: DataFrame, staging: StagingTable, load: WindowLoad) -> StagingTable:
        self._load_frame(frame, staging.table, load.model)
        return self._staged(staging, load)

    def _stage_arrow(self, batch: pa.Table, staging: StagingTable, load: WindowLoad) -> StagingTable:
        self._load_arrow(batch, staging.table, load)
        return self._staged(staging, load)

    def _staged(self, staging: StagingTable, load: WindowLoad) -> StagingTable:
        """The ``stage`` record: the staging table, or, loaded straight into the table
        (``copy-into``, ``clone-and-exchange``), that table; whether it took the empty-table load."""
        strategy = self.empty_table_load
        fields: dict[str, Any] = {"staging_table": staging.name}
        if strategy == "create-and-rename":
            fields["fresh_table"] = staging.into_empty
        elif strategy in ("copy-into", "clone-and-exchange"):
            if staging.into_empty:
                fields = {"loaded_into": staging.target_name}
            fields["straight_into_target"] = staging.into_empty
        log_phase("stage", transfer_id=load.transfer_id, destination=self.name, model=load.model.model_name,
                  **fields)
        return staging

    def _remove_staging(self, staging: StagingTable, load: WindowLoad) -> None:
        if staging.held is not None:  # a window held here staged nothing
            return
        with self._translated_errors():  # by its name: ``table`` may be the relation read from it
            self.session.execute(self.dialect.drop_table(self.dialect.qualified(self.container, staging.name)))
        log_phase("clean up", transfer_id=load.transfer_id, destination=self.name, model=load.model.model_name,
                  staging_table=staging.name)

    def _refuse(self, staging: StagingTable, load: WindowLoad) -> None:
        """One scan of the staged window (its rows, those newer than the high watermark, its
        largest last-modified value, its size, its rows newly marked deleted) that refuses a NULL
        key or last-modified value by name, then what the engine cannot hold, then a key twice
        (unless the staging table may become the target: building its key refuses one then)."""
        model = load.model
        with self._translated_errors():
            state = self.read_state(model, "refresh_state" if load.into_refresh else "state")
            hw = None if state.high_watermark is None else model.change_column.value(state.high_watermark)
            rows, delta_rows, max_lm, null_keys, null_lms, marked, volume = self.session.one(  # pyright: ignore[reportGeneralTypeIssues]
                self.dialect.batch_summary(model, staging.table, hw))
            if null_keys or null_lms:
                self._refuse_null_values(load, staging.table)
            self._refuse_values(load, staging)
            if not (staging.into_empty and self.empty_table_load in KEYED_LOADS):
                self._refuse_duplicate_keys(load, staging)
            if volume is None:
                size = self.dialect.table_size(self.container, staging.name)
                volume = (self.session.one(size) or (0,))[0] if size is not None else staging.volume
        staging.rows, staging.volume, staging.marked = int(rows), int(volume or 0), int(marked or 0)
        staging.delta_rows = int(rows) if state.high_watermark is None else int(delta_rows or 0)
        staging.max_last_modified = None if max_lm is None else model.change_column.moment(max_lm)

    def _refuse_null_values(self, load: WindowLoad, staging: str) -> None:
        model = load.model
        keys = [c.destination_name for c in model.primary_key]
        for key in keys:
            row = self.session.one(self.dialect.first_key_where_null(staging, keys, key))
            if row is not None:
                raise null_key_error(model, self.name, key, dict(zip(keys, row, strict=True)))
        row = self.session.one(self.dialect.first_key_where_null(staging, keys, model.last_modified.destination_name))
        if row is not None:
            raise null_last_modified_error(model, self.name, dict(zip(keys, row, strict=True)))

    def _refuse_duplicate_keys(self, load: WindowLoad, staging: StagingTable) -> None:
        if staging.duplicates_refused:
            return
        model = load.model
        keys = [c.destination_name for c in model.primary_key]
        row = self.session.one(self.dialect.first_duplicate_key(staging.table, keys))
        if row is not None:
            raise duplicate_key_error(model, self.name, dict(zip(keys, row, strict=False)), row[-1])
        staging.duplicates_refused = True

    def _commit(self, staging: StagingTable | None, load: WindowLoad) -> WindowResult:
        """One commit (:meth:`_atomically`): the status row locked, the rows merged and their soft
        deletes applied, the new state recorded. A window loaded into an empty table is published
        by its load (:meth:`_load_into_empty`), unless the table got rows meanwhile."""
        if staging is not None and staging.into_empty:
            result = self._load_into_empty(staging, load)
            if result is not None:
                return result
            staging.into_empty = False
            with self._translated_errors():
                self._refuse_duplicate_keys(load, staging)
        model = load.model
        column = "refresh_state" if load.into_refresh else "state"
        with self._rows_refused(load), self._translated_errors(), self._atomically(load):
            state = self._lock_state(model, column)
            if staging is None:  # a window of no rows: its state alone
                rows = delta_rows = volume = rows_deleted = 0
                max_lm = None
            else:
                rows, delta_rows, volume = staging.rows, staging.delta_rows, staging.volume
                max_lm = staging.max_last_modified
                rows_deleted = self._merge(load, staging)
            new_state = next_state(state, load, max_lm)
            self._write_state(load, new_state)
        return WindowResult(rows, delta_rows, volume, max_lm, new_state, rows_deleted)

    def _write_state(self, load: WindowLoad, state: ModelState) -> None:
        """A window's new state: the refresh's progress, or the model's."""
        if load.into_refresh:
            self._set_state(load.model, "refresh_state", state)
        else:
            self._record_state(load.model, state, load.transfer_id)

    def _load_into_empty(self, staging: StagingTable, load: WindowLoad) -> WindowResult | None:
        """The one path of the empty-table load: the table still empty, the rows marked deleted
        left out when the model removes them (the table holds nothing they would remove), the
        window published by the vendor's step; ``None`` if the table got rows meanwhile."""
        model, rows_deleted = load.model, staging.marked
        with self._translated_errors():
            if not self._still_empty(staging):
                return None
            if model.removes_deleted_rows:
                self._leave_out_marked(staging, load)
                rows_deleted = 0
            new_state = self._publish_empty_load(staging, load)
        if new_state is None:
            return None
        return WindowResult(staging.rows, staging.delta_rows, staging.volume, staging.max_last_modified,
                            new_state, rows_deleted)

    def _merge(self, load: WindowLoad, staging: StagingTable) -> int:
        """The staged rows into the target, inside the commit; the rows deleted (the soft deletes
        applied, or, with ``keep_deleted_rows``, the rows newly marked)."""
        model = load.model
        marker, skip, rows_deleted = model.deletion_marker, None, staging.marked
        if model.removes_deleted_rows:  # rows marked deleted are removed, never inserted
            skip = self.dialect.marked(marker.destination_name,  # pyright: ignore[reportOptionalMemberAccess]
                                       marker.data_type)  # pyright: ignore[reportOptionalMemberAccess]
            rows_deleted = self.session.execute(self.dialect.soft_delete(staging.target, staging.table, model))
        for statement in self.dialect.upsert(staging.target, staging.table, model, skip):
            self.session.execute(statement)
        return rows_deleted

    # -- the full refresh's publish --------------------------------------------------------------

    @contextmanager
    def _publishing(self) -> Iterator[None]:
        with self._translated_errors():
            if self.dialect.transactional_ddl:
                with self._atomically():
                    yield
            else:
                yield

    def _refresh_state(self, model: ModelConfig) -> ModelState:
        if self.dialect.transactional_ddl:
            return self._lock_state(model, "refresh_state")
        return self.read_state(model, "refresh_state")

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        """The live table replaced by the one built aside, and its state recorded: in the publish's
        one transaction, or (DDL not transactional) by one atomic rename between two commits."""
        if self.dialect.transactional_ddl:
            self.session.execute(self.dialect.drop_table(self.table(model)))
            self._rename(model, [(self.refresh_table(model), model.model_name)])
            self._record_state(model, state, transfer_id)
            self._set_state(model, "refresh_state", None)
            return
        rename_publish.publish(self, model, state, transfer_id)

    def _rename(self, model: ModelConfig, pairs: list[tuple[str, str]]) -> None:
        """Rename (qualified table, new name) pairs at once (a vendor may bound the wait)."""
        for statement in self.dialect.rename_tables(self.container, pairs):
            self.session.execute(statement)

    # -- outside a transfer's windows ------------------------------------------------------------

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        """Remove the rows whose primary key and last-modified value ``frame`` holds (a row that
        changed since is left alone): staged like a batch (by the bulk load, so memory stays
        flat), then one ``DELETE`` matching them, in one transaction."""
        chosen = [*model.primary_key, model.last_modified]
        columns = [c.destination_name for c in chosen]
        name = self.staging_table_name(model, transfer_id)
        staging = StagingTable(name, self.dialect.qualified(self.container, name), model.model_name, self.table(model))
        self._create_staging_table(staging, model, chosen, logged=False)
        try:
            self._load_frame(frame.select(*columns), staging.table, model)
            with self._translated_errors():
                return self._delete_staged(staging, columns)
        finally:
            with self._translated_errors():
                self.session.execute(self.dialect.drop_table(staging.table))

    def _delete_staged(self, staging: StagingTable, columns: list[str]) -> int:
        """The sweep's staged rows deleted from the target (one ``DELETE``, one transaction); the
        rows deleted."""
        with self.session.transaction():
            return self.session.execute(self.dialect.delete_matching(staging.target, staging.table, columns))

    def has_table(self, model: ModelConfig) -> bool:
        with self._translated_errors():
            return self._exists(model.model_name)

    # -- test-connection: the flow here, what is tried in the vendor's plan ------------------------

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        """Reach the endpoint, log in, then each step a transfer takes, on probe tables (a step failing skips
        the later ones, a refused one names its grant), then drop what the steps created: as the vendor's
        :meth:`_probe_plan` says."""
        probe, plan = Probe(target), self._probe_plan(models, "_tp_probe_" + uuid.uuid4().hex[:12])
        later = [*(step.name for step in plan.steps), *plan.after]
        if plan.endpoint is not None and not probe.reach(*plan.endpoint):
            probe.skipped([plan.login, *later], plan.unreachable)
            return probe.checks
        try:
            plan.connect()
        except plan.login_errors as exc:
            probe.failed(plan.login, getattr(exc, "reason", None) or str(exc).splitlines()[-1].strip(),
                         plan.login_fix if isinstance(plan.login_fix, str) else plan.login_fix(exc))
            probe.skipped(later, plan.no_login)
            return probe.checks
        probe.passed(plan.login)
        try:
            self._probe_run(probe, plan, models)
        finally:
            for undo in plan.cleanup:
                with suppress(Exception):  # reported by the step that failed
                    if callable(undo):
                        undo()
                    else:
                        self.session.execute(undo)
            self.close()
        return probe.checks

    def _probe_plan(self, models: list[ModelConfig], name: str) -> ProbePlan:
        """What ``test-connection`` tries, its probe tables named from ``name``."""
        raise NotImplementedError

    def _probe_run(self, probe: Probe, plan: ProbePlan, models: list[ModelConfig]) -> None:
        """The plan's steps, each statement run on the session."""
        probe.run(plan.steps, self.session.execute, plan.errors, plan.reason)

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """Read through the session (:meth:`~.dialect.Dialect.read_rows`), then handed to Spark:
        fine for millions of rows, not for a table beyond the driver's memory."""
        import pyarrow as pa

        with self._translated_errors():
            if not self._exists(model.model_name):
                return empty_frame(spark, model)
            rows = self.session.all(self.dialect.read_rows(self.table(model), model.columns))
        table = pa.table({c.destination_name: [_arrow_value(c, row[i]) for row in rows]
                          for i, c in enumerate(model.columns)}, schema=arrow_schema(model))
        return spark.createDataFrame(table) if table.num_rows else empty_frame(spark, model)


def _arrow_value(column: ColumnConfig, value: Any) -> Any:
    """A value read back as Arrow takes it: JSON as its text, a decimal (read as text where that is
    exact) as a ``Decimal``."""
    if value is None or column.data_type not in ("json", "decimal"):
        return value
    return str(value) if column.data_type == "json" else Decimal(value)
