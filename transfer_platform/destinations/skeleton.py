"""The one order of a transfer into a destination, written once: :class:`Writer`.

A destination's writer subclasses :class:`Writer` and implements its *primitives* (the methods
marked :func:`primitive` below: reach the destination, lock a model, read its states, stage a
window, commit it, ...); the order they run in is :class:`Writer`'s alone (the template methods
``prepare``, ``committed_state``, ``write_window``, ``write_arrow``, ``write_empty`` and
``publish_refresh``), so every destination keeps the same promises:

``prepare``
    reach the destination (and create its bookkeeping) -> lock the model -> clean what dead
    transfers of the model left in staging (under the lock: no live transfer owns any) -> read
    the committed states (the live table's, an unfinished full refresh's) -> then one of: begin
    a full refresh aside (asked for, or the unfinished one's columns no longer the model's);
    carry on the unfinished one; or plan the live table's column changes (every refusal here,
    before anything changes), announce the transfer, apply them.
``write_window`` / ``write_arrow``
    create the window's staging -> stage the rows -> refuse the batch if it breaks a rule (a NULL
    key, a NULL last-modified value, a key twice) -> commit rows and new state in one commit ->
    drop the staging, whatever happened.
``write_empty``
    commit the new state alone (no rows, no staging).
``publish_refresh``
    in one commit: read the refresh's state, replace the live table by the one built aside and
    record that state.

A writer declares the forms of rows it accepts (``accepts``: Spark rows and Arrow, which the
template methods above take; a COPY stream, with ``write_relayed`` and ``write_streamed``): the
transfer picks each model's route from it and what the source offers (``transfers/routes.py``).

A subclass that leaves a primitive unimplemented, or declares a form of rows without its write,
is refused when it is defined (at import), naming itself and what it lacks; a base of writers
declares ``abstract=True`` to be let through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final

from transfer_platform.core.columns import ColumnChanges
from transfer_platform.core.routes import Rows
from transfer_platform.core.watermarks import ModelState
from transfer_platform.tuning import DEFAULT, Tuning

if TYPE_CHECKING:
    from datetime import datetime

    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.config.models import ModelConfig
    from transfer_platform.core.windows import Window
    from transfer_platform.probes import Check
    from transfer_platform.sources.relay import RelayRead


@dataclass(frozen=True)
class WindowLoad:
    """One window's batch and what its commit must record."""

    model: ModelConfig
    transfer_id: str
    progress: Window  # the part of the configured range this batch completes
    configured_start: datetime
    into_refresh: bool = False  # a full refresh: load the table being built aside, not the live one
    read_from: datetime | None = None  # where the batch's read began (the lookback below progress included)


@dataclass(frozen=True)
class Prepared:
    """What a destination holds for a model when a transfer starts."""

    state: ModelState  # committed with the live table
    refresh: ModelState | None = None  # a full refresh being built aside (new or unfinished)
    schema_changes: tuple[str, ...] = ()  # columns added to or dropped from the live table


@dataclass(frozen=True)
class WindowResult:
    rows_transferred: int
    delta_rows_transferred: int
    volume_bytes: int
    max_last_modified: datetime | None
    state: ModelState  # the state committed with the data
    # rows the window removed because the source marks them deleted (or, with keep_deleted_rows,
    # rows it delivered newly marked deleted: newer than the previous high watermark)
    rows_deleted: int = 0
    # rows read but not delivered: a key's older versions and identical copies of the one delivered
    # (set by the transfer, which chooses one version per key before the writer sees the window)
    versions_superseded: int = 0


class Stale:
    """An unfinished full refresh whose columns are no longer the model's: begun again."""

    def __repr__(self) -> str:
        return "STALE"


#: what :meth:`Writer._read_states` returns for an unfinished refresh that must start again
STALE: Final = Stale()


def next_state(before: ModelState, load: WindowLoad, max_last_modified: datetime | None) -> ModelState:
    """The state a window's commit records: ``before`` moved past the window's progress, its
    largest last-modified moment (``None``: no row) noted. Every destination records exactly this,
    with the window's rows, in the same commit."""
    return before.after_window(load.progress, batch_max_last_modified=max_last_modified,
                               configured_start=load.configured_start)


def primitive(method: Callable) -> Callable:
    """Mark a method of :class:`Writer` as one every destination implements."""
    method.__primitive__ = True
    return method


class Writer:
    """A destination's writer: the template methods here, the primitives in the subclass."""

    #: the primitives, found at class creation (methods marked :func:`primitive`)
    PRIMITIVES: ClassVar[tuple[str, ...]] = ()
    #: the forms of rows it takes (``transfer_platform/core/routes.py``); a COPY stream is written
    #: by methods of its own
    accepts: frozenset[Rows] = frozenset({Rows.SPARK, Rows.ARROW})
    _WRITES_OF: ClassVar[dict[Rows, tuple[str, ...]]] = {Rows.COPY_STREAM: ("write_relayed", "write_streamed")}

    name: str

    def __init__(self, destination: Any, tuning: Tuning = DEFAULT) -> None:  # a configured destination
        self.destination = destination
        self.name = destination.name
        self.tuning = tuning

    def __init_subclass__(cls, *, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if abstract:
            return
        missing = [name for name in Writer.PRIMITIVES if getattr(getattr(cls, name), "__primitive__", False)]
        if missing:
            raise TypeError(f"destination writer {cls.__module__}.{cls.__qualname__} does not implement "
                            f"{', '.join(missing)} (the primitives of transfer_platform.destinations."
                            "skeleton.Writer)")
        for rows in sorted(cls.accepts):
            unwritten = [name for name in Writer._WRITES_OF.get(rows, ()) if getattr(cls, name) is getattr(Writer, name)]
            if unwritten:
                raise TypeError(f"destination writer {cls.__module__}.{cls.__qualname__} accepts {rows} but does "
                                f"not implement {', '.join(unwritten)}")

    # -- template methods: the order, the same for every destination ----------------------------

    def prepare(self, model: ModelConfig, transfer_id: str, *, full_refresh: bool = False) -> Prepared:
        """Remove what dead transfers left in staging and return the model's committed state.

        ``full_refresh``: start building a new table aside (whatever was built aside before is
        dropped). Otherwise an unfinished full refresh is carried on; without one, the live table
        is created if needed and its columns follow the model (added, dropped; a changed type or
        primary key is refused with ``SchemaMismatch``)."""
        with self._preparing():
            self._reach()
            self.lock_model(model, transfer_id)
            self._clean_staging(model)  # under the lock: no live transfer of the model owns any
            state, refresh = self._read_states(model)
            if full_refresh or refresh is STALE:
                self._announce(model, transfer_id)
                return Prepared(state, self._begin_refresh(model, state))
            if refresh is not None:
                self._announce(model, transfer_id)
                return Prepared(state, refresh)
            planned = self._plan_columns(model)  # every refusal before anything changes
            self._announce(model, transfer_id)
            return Prepared(state, None, self._apply_columns(model, planned, state))

    def committed_state(self, model: ModelConfig) -> Prepared:
        """The model's committed state as the next transfer would find it, read without side
        effects: nothing is created, altered, dropped or locked for writing (a dry run, integrity
        checks). ``state``: the live table's (empty if nothing was ever committed); ``refresh``:
        the state an unfinished full refresh would be carried on from, else ``None`` (empty but
        the live high watermark when the model's columns changed since it began: the next
        transfer starts it again); ``schema_changes`` is always empty (nothing is compared)."""
        with self._reading():
            state, refresh = self._read_states(model)
        if refresh is STALE:
            refresh = ModelState(high_watermark=state.high_watermark)
        return Prepared(state, refresh)

    def write_window(self, frame: DataFrame, load: WindowLoad) -> WindowResult:
        """Stage ``frame``, refuse it if it breaks a rule (NULL key, NULL last-modified, duplicate
        key), then commit it and the new state at once; the staging is dropped either way."""
        return self._write(load, lambda staging: self._stage_frame(frame, staging, load), in_memory=False)

    def write_arrow(self, batch: pa.Table, load: WindowLoad) -> WindowResult:
        """:meth:`write_window` for a window already read into this process as Arrow (columns
        and types of ``arrow_schema``): a small window read together with its neighbours in one
        Spark job, so that it costs no Spark job of its own."""
        return self._write(load, lambda staging: self._stage_arrow(batch, staging, load), in_memory=True)

    def write_relayed(self, relay: RelayRead, spark: SparkSession, load: WindowLoad) -> WindowResult:
        """:meth:`write_window` for a window relayed as a COPY stream by Spark's tasks
        (:mod:`transfer_platform.sources.relay`): a writer that accepts :attr:`Rows.COPY_STREAM`."""
        raise NotImplementedError(f"destination {self.name!r} accepts no COPY stream")

    def write_streamed(self, stream: Callable[[dict[str, str]], Iterable[bytes]], load: WindowLoad) -> WindowResult:
        """:meth:`write_arrow` for a small window streamed as a COPY stream by this process
        (``stream(types)``: its chunks, each value cast to the staging column's type in
        ``types``): a writer that accepts :attr:`Rows.COPY_STREAM`."""
        raise NotImplementedError(f"destination {self.name!r} accepts no COPY stream")

    def write_empty(self, load: WindowLoad) -> WindowResult:
        """Record a window in which the source holds no row (asked before it was read): the state
        moves on in one commit, as :meth:`write_window` of no rows would, with no Spark job and
        no staging."""
        return self._commit(None, load)

    def _write(self, load: WindowLoad, stage: Callable[[Any], Any], *, in_memory: bool) -> WindowResult:
        staging = self._create_staging(load, in_memory=in_memory)
        try:
            staged = stage(staging)
            self._refuse(staged, load)
            return self._commit(staged, load)
        finally:
            if staging is not None:
                self._remove_staging(staging, load)

    def publish_refresh(self, model: ModelConfig, transfer_id: str) -> ModelState:
        """Replace the live table by the one built aside, and its state by the refresh's, in one
        commit: readers see the old table until then, never an empty or half-built one."""
        with self._publishing():
            state = self._refresh_state(model)
            self._replace_live(model, state, transfer_id)
        return state

    # -- hooks (a vendor may override; nothing by default) -----------------------------------------

    @contextmanager
    def _preparing(self) -> Iterator[None]:
        """Around ``prepare``: a vendor's translation of what the destination refuses."""
        yield

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Around ``committed_state``'s read (a read-only transaction, say)."""
        yield

    @contextmanager
    def _publishing(self) -> Iterator[None]:
        """Around ``publish_refresh``: its one commit (a transaction, say)."""
        yield

    def _announce(self, model: ModelConfig, transfer_id: str) -> None:
        """The transfer is about to write the model (after the last refusal of ``prepare``)."""

    # -- primitives: what each destination implements ---------------------------------------------

    @primitive
    def check(self) -> None:
        """Raise ``ConnectionFailure`` if the destination cannot be reached."""
        raise NotImplementedError

    @primitive
    def close(self) -> None:
        """Release connections and the models' locks held for the transfer."""
        raise NotImplementedError

    @primitive
    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """Hold the model's lock in the destination until :meth:`close` (``prepare`` takes it):
        one transfer or delete sweep of a model at a time, however it was started; raises
        ``TransferRunning`` after ``tuning.lock_wait_seconds``."""
        raise NotImplementedError

    @primitive
    def _reach(self) -> None:
        """``prepare``'s first step: the destination reached, its bookkeeping created if missing."""
        raise NotImplementedError

    @primitive
    def _clean_staging(self, model: ModelConfig) -> None:
        """Remove what dead transfers of ``model`` left (the model's lock is held)."""
        raise NotImplementedError

    @primitive
    def _read_states(self, model: ModelConfig) -> tuple[ModelState, ModelState | Stale | None]:
        """(the live table's committed state, an unfinished full refresh's: its state, or
        :data:`STALE` if its columns are no longer the model's, or ``None``), read only."""
        raise NotImplementedError

    @primitive
    def _begin_refresh(self, model: ModelConfig, live: ModelState) -> ModelState:
        """An empty table aside (replacing any), its state starting over but for the live high
        watermark (the reference of ``delta_rows_transferred``); returns that state."""
        raise NotImplementedError

    @primitive
    def _plan_columns(self, model: ModelConfig) -> ColumnChanges:
        """The live table created if missing; what bringing its columns to the model's would add
        and drop, refusing (``SchemaMismatch``) a changed type or key, or a drop not allowed:
        nothing altered yet."""
        raise NotImplementedError

    @primitive
    def _apply_columns(self, model: ModelConfig, planned: ColumnChanges, state: ModelState) -> tuple[str, ...]:
        """Add and drop ``planned``'s columns of the live table; one sentence per change."""
        raise NotImplementedError

    @primitive
    def _create_staging(self, load: WindowLoad, *, in_memory: bool) -> Any:  # the vendor's
        """Where the window is staged (a table, a folder), created; ``None`` if nothing is staged
        aside (``in_memory``: the rows are already in this process)."""
        raise NotImplementedError

    @primitive
    def _stage_frame(self, frame: DataFrame, staging: Any, load: WindowLoad) -> Any:
        """Spark writes the window into ``staging``; returns what the commit needs (the vendor's)."""
        raise NotImplementedError

    @primitive
    def _stage_arrow(self, batch: pa.Table, staging: Any, load: WindowLoad) -> Any:
        """:meth:`_stage_frame` for a window already here as Arrow."""
        raise NotImplementedError

    @primitive
    def _refuse(self, staged: Any, load: WindowLoad) -> None:
        """Raise ``DataError`` for a NULL key, a NULL last-modified value, ``DuplicateKey`` for a
        key twice in the staged window (before anything is committed)."""
        raise NotImplementedError

    @primitive
    def _commit(self, staged: Any, load: WindowLoad) -> WindowResult:
        """One commit of the staged rows (``None``: no row) and the model's new state."""
        raise NotImplementedError

    @primitive
    def _remove_staging(self, staging: Any, load: WindowLoad) -> None:
        """Remove the window's staging (after its commit, or its failure)."""
        raise NotImplementedError

    @primitive
    def _refresh_state(self, model: ModelConfig) -> ModelState:
        """The state of the complete refresh built aside (locked, in ``_publishing``)."""
        raise NotImplementedError

    @primitive
    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        """The live table replaced by the one built aside, its state by ``state``."""
        raise NotImplementedError

    @primitive
    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """The delivered table as a Spark DataFrame."""
        raise NotImplementedError

    @primitive
    def has_table(self, model: ModelConfig) -> bool:
        """Whether :meth:`read_table` has a delivered table to read, found without side effects
        (integrity checks and the delete sweep treat a destination without one as empty)."""
        raise NotImplementedError

    @primitive
    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        """Remove the rows whose primary key and last-modified value ``frame`` holds, without
        holding them all in memory; returns how many were removed."""
        raise NotImplementedError

    @primitive
    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        """``test-connection``: reach, log in, then try everything a transfer of ``models`` does
        here (create, write, alter, rename, drop; or write, rename, delete files), undoing each at
        once; one ``Check`` per step, a failure with its grant or setting."""
        raise NotImplementedError


Writer.PRIMITIVES = tuple(name for name, value in vars(Writer).items() if getattr(value, "__primitive__", False))
