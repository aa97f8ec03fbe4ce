"""Running one model's transfer to one destination: plan windows, read, write, report.

Knows nothing of Dagster: :class:`transfer_platform.transfers.entry.Transfer` (what the asset,
the transfer job, the command line and the demo call) and the tests drive the generator
:func:`transfer_model` and turn each committed window into whatever they report.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.planning import (
    ModelWindowing,
    PlannedWindow,
    plan_transfer_windows,
    windowing_for,
)
from transfer_platform.core.timeutil import isoformat
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.destinations.base import (
    DestinationWriter,
    WindowLoad,
    WindowResult,
    arrow_schema,
)
from transfer_platform.errors import (
    ConnectionFailure,
    DataError,
    DuplicateKey,
    TransferPlatformError,
)
from transfer_platform.phases import log_phase
from transfer_platform.runtime.connections import spark_error_reason
from transfer_platform.runtime.spark_session import SparkServerLost, server_lost
from transfer_platform.sources.base import (
    ORIGIN_COLUMN,
    WINDOW_COLUMN,
    ReadRequest,
    SourceReader,
    reader_for,
)
from transfer_platform.sources.direct import DirectReads
from transfer_platform.sources.shared_reads import StagedReader, TransferStaging, next_lower
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.versions import conflict_of, latest_versions, latest_versions_frame
from transfer_platform.tuning import DEFAULT, Tuning

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG = logging.getLogger("transfer_platform.transfer")


@dataclass(frozen=True)
class WindowOutcome:
    planned: PlannedWindow
    result: WindowResult
    partition_key: str | None
    into_refresh: bool = False  # committed to a table built aside, live once the refresh publishes


@dataclass
class TransferRequest:
    """What the runner moves (``order``: its destination, full refresh, window bounds, schedule
    tick) and with what: the Spark session, the configuration, the destination's open writer, the
    transfer's id and its "now"."""

    spark: SparkSession
    config: PlatformConfig
    order: TransferOrder
    writer: DestinationWriter
    transfer_id: str
    now: datetime
    log: Any = field(default=_LOG)
    #: told each model's number of planned windows before the first moves (progress displays)
    on_plan: Callable[[str, int], None] | None = None
    #: the sizes the windows are read with (``run_rows``, ``run_windows``: see :func:`_steps`)
    tuning: Tuning = DEFAULT


def transfer_model(
    request: TransferRequest, model: ModelConfig, *, partitions: list[Window] | None = None
) -> Iterator[ModelState | WindowOutcome]:
    """Move one model window by window.

    Yields the model's committed state first, then one outcome per window, each already
    committed. A failure in window k raises after windows before k have been yielded.

    Nothing in the destination is created, altered or dropped before the read is proven on the
    source (:meth:`SourceReader.check_read`): a model that does not fit its source fails with the
    destination exactly as it was.

    A full refresh (asked for, or left unfinished by an earlier transfer) loads a table built
    aside and yields the published live state last, once that table has replaced the live one.
    """
    config = request.config
    destination = config.destination(request.order.destination)
    recipient = config.recipient(destination.recipient)
    source = config.source(model.source_name)
    windowing = windowing_for(config, request.order.destination, model)
    ids = {"transfer_id": request.transfer_id, "destination": destination.name, "model": model.model_name,
           "sink": request.log}

    reader = reader_for(source)
    staging = _staging_for(request, model, partitions)
    staged = None if staging is None else staging.joined(reader)
    source_request = request
    if staged is not None:  # this tick's batch lists this destination: its rows are staged
        request = _up_to(request, staged)
    # the read proven on the source as it is (columns, kinds, casts; no row read) before the
    # writer's prepare creates, alters or drops anything: a mistyped model changes nothing. Columns
    # the database's driver reads as they are prove it alone (and its small windows skip Spark);
    # its answer shows the source reachable, else the source is checked (a named refusal) first
    proof = ReadRequest(model, recipient.id_in_provider_system, proof_bounds(windowing, request.now), destination.name)
    tuning = request.tuning
    proven = (DirectReads.proven(reader, proof) if staged is None and (tuning.direct_reads or tuning.relay_windows)
              else None)
    direct = proven if tuning.direct_reads else None
    relays = proven is not None and tuning.relay_windows and _relays(reader, request.writer)
    if proven is None:
        if staged is None:
            reader.check(destination.name)
        (staged or reader).check_read(request.spark, proof)
    try:
        yield from _transfer_model(request, source_request, model, destination, recipient, windowing, ids, reader,
                                   staging, staged, partitions, direct, relays=relays)
    finally:
        if proven is not None:
            proven.close()


def _transfer_model(request: TransferRequest, source_request: TransferRequest, model: ModelConfig,
                    destination: Any, recipient: Any, windowing: ModelWindowing, ids: dict[str, Any],
                    reader: SourceReader, staging: TransferStaging | None, staged: StagedReader | None,
                    partitions: list[Window] | None, direct: DirectReads | None, *, relays: bool,
                    ) -> Iterator[ModelState | WindowOutcome]:
    """:func:`transfer_model` once the read is proven: the writer prepared, the windows moved."""
    prepared = request.writer.prepare(model, request.transfer_id, full_refresh=request.order.full_refresh)
    for change in prepared.schema_changes:
        log_phase("schema", **ids, level=logging.WARNING, change=change)
    refreshing = prepared.refresh is not None
    state = prepared.refresh if refreshing else prepared.state
    yield state
    planned = plan_transfer_windows(windowing, now=request.now, state=state, refreshing=refreshing,
                                    partitions=partitions, start=request.order.start, end=request.order.end)
    if staging is not None:
        request, planned, staged = _staged_plan(source_request, request, windowing, state, refreshing,
                                                planned, staging, staged, reader)
    log_phase("plan", **ids, windows=len(planned), kind="full_refresh" if refreshing else "incremental",
              built_aside=refreshing, watermark=state.watermark,
              **({"staged_batch": staged.batch.name} if staged is not None else {}))
    if request.on_plan is not None:
        request.on_plan(model.model_name, len(planned))
    reads = [ReadRequest(model, recipient.id_in_provider_system, w.bounds, destination.name) for w in planned]
    read_with = staged or reader
    # a staged batch is read from the staging, never from the source directly
    move = _WindowMover(request, model, read_with, windowing, refreshing, ids, direct if staged is None else None,
                        relays=relays and staged is None)
    tuning = request.tuning
    counter = direct if direct is not None and staged is None else read_with  # direct: on its connection
    steps = (_steps(_window_rows(counter, request.spark, reads, tuning), tuning) if read_with.counts_without_spark
             else _unknown_steps(len(reads), tuning))
    last = state
    for step, indices in steps:
        for outcome in move.step(step, [planned[i] for i in indices], [reads[i] for i in indices]):
            last = outcome.result.state
            yield outcome
    if refreshing:
        published = request.writer.publish_refresh(model, request.transfer_id)
        log_phase("publish", **ids, watermark=published.watermark)
        last = published
        yield published
    if staging is not None:  # committed: the staged rows of this destination are no longer needed
        if staged is not None:
            staging.release(staged)
        staging.record(next_lower(windowing, last))


def _relays(reader: SourceReader, writer: DestinationWriter) -> bool:
    """Whether a window may be relayed from ``reader``'s source into ``writer``'s destination in
    PostgreSQL's binary COPY format (:mod:`transfer_platform.sources.relay`): a large one by
    Spark's tasks, a small one read alone streamed by this process."""
    from transfer_platform.sources.jdbc import PostgresReader

    return isinstance(reader, PostgresReader) and all(
        callable(getattr(writer, method, None)) for method in ("write_relayed", "write_streamed"))


def _staging_for(request: TransferRequest, model: ModelConfig,
                 partitions: list[Window] | None) -> TransferStaging | None:
    """Source staging for a plain incremental transfer (not a full refresh asked for, nor
    explicit windows or partitions) of a model whose source stages reads, else ``None``."""
    order = request.order
    if order.full_refresh or order.start is not None or order.end is not None or partitions is not None:
        return None
    return TransferStaging.for_transfer(request.config, model, request.order.destination, request.now, request.log,
                                        tick=order.tick)


def _up_to(request: TransferRequest, staged: StagedReader) -> TransferRequest:
    """The transfer planned up to the batch's upper bound at most (its watermark stops there)."""
    upper = staged.batch.upper
    return request if request.now <= upper else replace(request, now=upper)


def _staged_plan(source_request: TransferRequest, request: TransferRequest, windowing: ModelWindowing,
                 state: ModelState, refreshing: bool, planned: list[PlannedWindow],
                 staging: TransferStaging, staged: StagedReader | None,
                 reader: SourceReader) -> tuple[TransferRequest, list[PlannedWindow], StagedReader | None]:
    """The request, windows and staged reader the transfer moves with: the batch it is in if it
    reaches every planned read's lower bound; else a batch made now (the first of the tick) or
    joined meanwhile; else (a refresh, the first transfer, a lower bound the batch lacks) the
    source itself, planned up to the transfer's own "now"."""
    def plan(req: TransferRequest) -> list[PlannedWindow]:
        return plan_transfer_windows(windowing, now=req.now, state=state, refreshing=refreshing)

    def covers(reader_: StagedReader, windows: list[PlannedWindow]) -> bool:
        return all(w.bounds.lower >= reader_.batch.lower for w in windows)

    if staged is not None:
        if not refreshing and covers(staged, planned):
            return request, planned, staged
        staging.release(staged)  # it cannot serve this transfer: the source is read as without staging
        request, planned = source_request, plan(source_request)
    if refreshing or state.watermark is None or not planned:
        return request, planned, None
    joined = staging.create_or_join(request.spark, reader, min(w.bounds.lower for w in planned), request.now)
    if joined is None:
        return request, planned, None
    staged_request = _up_to(request, joined)
    staged_planned = plan(staged_request) if staged_request is not request else planned
    if covers(joined, staged_planned):
        return staged_request, staged_planned, joined
    staging.release(joined)
    return request, planned, None


def proof_bounds(windowing: ModelWindowing, now: datetime) -> ReadBounds:
    """Bounds for :meth:`SourceReader.check_read`: any would do (no row is read); the configured
    range up to ``now``, so that the query is the one a transfer sends."""
    start = windowing.configured_start
    end = max(now, start + timedelta(seconds=1))
    return ReadBounds(start, end, Window(start, end))


#: windows asked at once how many rows they hold: the answer is at most this many windows old
#: when a window is read (a row committed meanwhile is found by the next transfer's lookback)
LOOKAHEAD_WINDOWS = 200
# Neighbouring windows that read at most ``Tuning.run_rows`` rows in all are read together, in
# one Spark job (at most ``Tuning.run_windows`` windows: a union of their reads), into this
# process as Arrow (so this bounds its memory), then committed one by one; a window that may
# read more is read alone and staged by Spark's executors.


def _window_rows(reader: SourceReader, spark: SparkSession, reads: list[ReadRequest],
                 tuning: Tuning) -> Iterator[int | None]:
    """For each read in turn, how many rows it may hold (up to ``run_rows + 1``; ``None``: not
    known): asked of the source ``LOOKAHEAD_WINDOWS`` windows at a time, just before they are
    moved, so that an empty window costs no Spark job and no staging."""
    for start in range(0, len(reads), LOOKAHEAD_WINDOWS):
        chunk = reads[start:start + LOOKAHEAD_WINDOWS]
        answer = reader.window_rows(spark, chunk, tuning.run_rows + 1)
        yield from answer if answer is not None else [None] * len(chunk)


def _steps(sizes: Iterator[int | None], tuning: Tuning) -> Iterator[tuple[str, list[int]]]:
    """How the windows (by index, in order) are moved: ``("empty", [i])`` holds no row,
    ``("together", [i, j, ...])`` neighbours read in one Spark job (``run_rows``, ``run_windows``),
    ``("alone", [i])`` read and staged on its own (large, or of unknown size)."""
    run: list[int] = []
    rows = 0
    most_rows, most_windows = tuning.run_rows, tuning.run_windows
    for i, size in enumerate(sizes):
        if run and (size is None or size == 0 or rows + size > most_rows or len(run) == most_windows):
            yield "together", run
            run, rows = [], 0
        if size == 0:
            yield "empty", [i]
        elif size is None or size > most_rows:
            yield "alone", [i]
        else:
            run.append(i)
            rows += size
    if run:
        yield "together", run


def _unknown_steps(windows: int, tuning: Tuning) -> Iterator[tuple[str, list[int]]]:
    """For a source that counts rows with a Spark job: ``("unknown", [i, j, ...])``, up to
    ``run_windows`` neighbours read together up to ``run_rows`` rows; only if they hold more
    are they counted (and moved as :func:`_steps` says)."""
    for start in range(0, windows, tuning.run_windows):
        yield "unknown", list(range(start, min(start + tuning.run_windows, windows)))


class _WindowMover:
    """Moves one model's windows for :func:`transfer_model`, each committed and reported on its own."""

    def __init__(self, request: TransferRequest, model: ModelConfig, reader: SourceReader,
                 windowing: ModelWindowing, refreshing: bool, ids: dict[str, Any],
                 direct: DirectReads | None = None, *, relays: bool = False) -> None:
        self.request, self.model, self.reader, self.direct = request, model, reader, direct
        self.relays = relays  # a window moved alone may be relayed (sources/relay.py) if the keys are unique
        self.windowing, self.refreshing, self.ids = windowing, refreshing, ids
        self._keys_unique: bool | None = None  # asked of the source once, at the first large window

    def _load(self, window: PlannedWindow) -> WindowLoad:
        return WindowLoad(model=self.model, transfer_id=self.request.transfer_id, progress=window.bounds.progress,
                          configured_start=self.windowing.configured_start, into_refresh=self.refreshing,
                          read_from=window.bounds.lower)

    def _outcome(self, window: PlannedWindow, result: WindowResult) -> WindowOutcome:
        key = None if window.partition is None else self.windowing.partition_key(window.partition)
        return WindowOutcome(window, result, key, self.refreshing)

    def step(self, step: str, windows: list[PlannedWindow], reads: list[ReadRequest]) -> Iterator[WindowOutcome]:
        """Move the windows of one step of :func:`_steps` or :func:`_unknown_steps`."""
        if step == "empty":
            yield self.empty(windows[0])
        elif step == "together":
            yield from self.together(windows, reads)
        elif step == "unknown":
            yield from self.together(windows, reads, up_to=self.request.tuning.run_rows)
        else:
            yield self.alone(windows[0], reads[0])

    def empty(self, window: PlannedWindow) -> WindowOutcome:
        """A window with no row: its state alone (the read was proven before anything was
        written: :meth:`SourceReader.check_read`)."""
        result = self.request.writer.write_empty(self._load(window))
        log_phase("load", **self.ids, read_from=window.bounds.lower, read_until=window.bounds.upper,
                  rows_transferred=0, empty=True, watermark=result.state.watermark)
        return self._outcome(window, result)

    def alone(self, window: PlannedWindow, read: ReadRequest) -> WindowOutcome:
        bounds = window.bounds
        if self._keys_unique is None:
            self._keys_unique = self.reader.keys_unique(read)
        if self.relays and self._keys_unique:
            return self._relayed(window, read)
        log_phase("read", **self.ids, read_from=bounds.lower, read_until=bounds.upper)
        frame = self.reader.read(self.request.spark, read, with_origin=True)
        resolved = None if self._keys_unique else latest_versions_frame(frame, self.model)
        with self._spark_errors(bounds.lower, bounds.upper):
            try:
                result = self.request.writer.write_window(
                    frame if resolved is None else resolved.delivered(self.model), self._load(window))
            except DuplicateKey as refused:  # two versions of a key share its latest last-modified value
                raise (None if resolved is None else conflict_of(resolved, self.model, refused)) or refused from None
            older, copies = (0, 0) if resolved is None else resolved.counts()
        result = self._superseded(result, older, copies, window)
        self._log_load(result)
        return self._outcome(window, result)

    def _relayed(self, window: PlannedWindow, read: ReadRequest) -> WindowOutcome:
        """A window streamed from the source into the destination's staging table in binary COPY
        format by Spark's tasks (:mod:`transfer_platform.sources.relay`), then committed as any
        window; its phase records say ``relayed``."""
        from transfer_platform.sources.relay import relay_for

        bounds = window.bounds
        slices = self.request.config.source(self.model.source_name).max_concurrent_queries_per_transfer
        log_phase("read", **self.ids, read_from=bounds.lower, read_until=bounds.upper, relayed=True, slices=slices)
        relay = relay_for(self.reader, read, slices)  # type: ignore[arg-type]
        with self._spark_errors(bounds.lower, bounds.upper):
            result = self.request.writer.write_relayed(relay, self.request.spark, self._load(window))  # type: ignore[attr-defined]
        self._log_load(result, relayed=True)
        return self._outcome(window, result)

    def _superseded(self, result: WindowResult, older: int, copies: int, window: PlannedWindow) -> WindowResult:
        """``result`` with the rows left out of its window because another version of their key
        was delivered (``older`` versions, identical ``copies``), said in a log line if any."""
        if not older + copies:
            return result
        log_phase("versions", **self.ids, read_from=window.bounds.lower, read_until=window.bounds.upper,
                  versions_superseded=older + copies, older_versions=older, identical_copies=copies,
                  rows_transferred=result.rows_transferred)
        return replace(result, versions_superseded=older + copies)

    def together(self, windows: list[PlannedWindow], reads: list[ReadRequest], *,
                 up_to: int | None = None) -> Iterator[WindowOutcome]:
        """Small windows (one, or neighbours): one Spark job reads them all (``read_together``:
        each row tagged with its window) into this process as Arrow; each window is then checked
        and committed on its own (one with no row as :meth:`empty`). If that job fails, each
        window is moved alone, so that those before the bad one commit and the error names its
        window. ``up_to``: their sizes are not known; the job reads at most one row more, and
        if there are more, the windows are counted and moved as :func:`_steps` says."""
        lower, upper = windows[0].bounds.lower, windows[-1].bounds.upper
        streams = up_to is None and len(windows) == 1 and self._streams(reads[0])
        log_phase("read", **self.ids, read_from=lower, read_until=upper, windows=len(windows),
                  **({"direct": True} if self.direct is not None else {}),
                  **({"relayed": True, "streamed": True} if streams else {}))
        if streams:
            outcome = self._streamed(windows[0], reads[0])
            if outcome is not None:
                yield outcome
                return
        table = self._read_directly(reads, up_to)
        if table is None:
            frame = self.reader.read_together(self.request.spark, reads)
            try:
                with self._spark_errors(lower, upper):
                    table = (frame if up_to is None else frame.limit(up_to + 1)).toArrow()
            except DataError as exc:
                if _cancelled(exc):
                    raise
                _LOG.debug("reading %d windows together failed (%s); each is read alone", len(windows), exc)
                for window, read in zip(windows, reads, strict=True):
                    yield self.alone(window, read)
                return
        if up_to is not None and table.num_rows > up_to:
            del table
            sizes = self.reader.window_rows(self.request.spark, reads, up_to + 1) or [None] * len(reads)
            for step, indices in _steps(iter(sizes), self.request.tuning):
                yield from self.step(step, [windows[i] for i in indices], [reads[i] for i in indices])
            return
        table = self.reader.tagged(table, reads)
        schema = arrow_schema(self.model)
        tags = table.column(WINDOW_COLUMN)
        origin = [ORIGIN_COLUMN] if ORIGIN_COLUMN in table.column_names else []
        for i, window in enumerate(windows):
            rows = table.filter(pc.equal(tags, i))
            if not rows.num_rows:
                yield self.empty(window)
                continue
            batch = rows.select(schema.names).cast(schema)
            for name in origin:
                batch = batch.append_column(name, rows.column(name))
            resolved = latest_versions(batch, self.model, self.request.order.destination)
            batch = resolved.table.select(schema.names)
            result = self._superseded(self.request.writer.write_arrow(batch, self._load(window)),
                                      resolved.older_versions, resolved.identical_copies, window)
            self._log_load(result, read_from=window.bounds.lower, read_until=window.bounds.upper)
            yield self._outcome(window, result)

    def _streams(self, read: ReadRequest) -> bool:
        """Whether a small window may be streamed from the source into the destination's staging
        in binary COPY format in this process, as a large one is relayed by Spark's tasks: read
        directly, relayed (:func:`_relays`), from a source holding each key once."""
        if self.direct is None or not self.relays:
            return False
        if self._keys_unique is None:
            self._keys_unique = self.direct.keys_unique(read)
        return self._keys_unique

    def _streamed(self, window: PlannedWindow, read: ReadRequest) -> WindowOutcome | None:
        """The window streamed (:meth:`_streams`), then committed as any window; ``None`` if the
        source failed meanwhile (nothing committed: the window is then read as any other, after a
        warning naming the failure)."""
        from transfer_platform.sources.direct import StreamFailed

        direct = self.direct
        assert direct is not None
        try:
            result = self.request.writer.write_streamed(  # type: ignore[attr-defined]
                lambda types: direct.copy_out(read, types), self._load(window))
        except StreamFailed as failed:  # said: the read again costs a source connection and time
            _LOG.debug("streaming the window failed", exc_info=True)
            log_phase("stream", **self.ids, level=logging.WARNING, failed=str(failed), read_again=True,
                      read_from=window.bounds.lower, read_until=window.bounds.upper)
            return None
        self._log_load(result, read_from=window.bounds.lower, read_until=window.bounds.upper, relayed=True)
        return self._outcome(window, result)

    def _read_directly(self, reads: list[ReadRequest], up_to: int | None) -> pa.Table | None:
        """The windows' rows read by the source database's driver (:mod:`~transfer_platform.sources.direct`);
        ``None`` to read them through Spark (no direct reads, or this one failed: Spark then
        reads them and names any failure as it always does)."""
        if self.direct is None:
            return None
        try:
            return self.direct.read_together(reads, arrow_schema(self.model), up_to)
        except (KeyboardInterrupt, ConnectionFailure):  # a source that stopped sending: not read again
            raise
        except Exception:  # noqa: BLE001 - read again through Spark, which names the failure
            _LOG.debug("reading %d windows directly failed; they are read through Spark", len(reads), exc_info=True)
            return None

    def _log_load(self, result: WindowResult, **where: Any) -> None:
        log_phase("load", **self.ids, **where, rows_transferred=result.rows_transferred,
                  delta_rows_transferred=result.delta_rows_transferred, rows_deleted=result.rows_deleted,
                  volume_bytes=result.volume_bytes, watermark=result.state.watermark)

    @contextmanager
    def _spark_errors(self, lower: datetime, upper: datetime) -> Iterator[None]:
        """Spark reads lazily: a bad value (a failed cast, a NULL key) surfaces while staging. As a
        DataError it names the model and does not stop the transfer's other models."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        try:
            yield
        except (Py4JJavaError, PySparkException) as exc:
            lost = server_lost(self.request.spark, exc)
            if lost is not None:
                raise lost from None
            stall = self._stalled_source(exc)
            if stall is not None:
                raise stall from None
            raise DataError(
                f"reading or staging the window {isoformat(lower)} <= last_modified < "
                f"{isoformat(upper)} failed: {spark_error_reason(exc)}",
                model=self.model.model_name, destination=self.request.order.destination,
                fix="check that each column's data_type matches the source values, that the "
                    "primary key columns hold no NULLs and that source_query runs",
            ) from None


    def _stalled_source(self, exc: BaseException) -> ConnectionFailure | None:
        """The error of a database source that stopped answering, if ``exc`` is its read timeout
        or the source, asked, does not answer in time (``transfer_platform/runtime/read_timeouts.py``)."""
        from transfer_platform.sources.jdbc import JdbcReader

        # rows staged for several tenants, a lake: not read from a connection here
        return self.reader.stall_of(exc) if isinstance(self.reader, JdbcReader) else None


def _cancelled(exc: BaseException) -> bool:
    """Whether a Spark error is the cancellation of the job (PySpark's SIGINT handler cancels
    every job): an interrupt, never a reason to read again."""
    return "cancel" in str(exc).lower()


class PartitionTally:
    """Adds up the reads of one partition (a partition below the one-minute grid is moved in
    chunks) so that its materialization reports the whole partition, not its last chunk."""

    def __init__(self) -> None:
        self._open: list[WindowOutcome] = []

    def add(self, outcome: WindowOutcome) -> WindowOutcome | None:
        """The partition's combined outcome once its last read has committed, else None."""
        self._open.append(outcome)
        if not outcome.planned.last_of_partition:
            return None
        parts, self._open = self._open, []
        if len(parts) == 1:
            return outcome
        first, last = parts[0], parts[-1]
        highest = [p.result.max_last_modified for p in parts if p.result.max_last_modified is not None]
        result = WindowResult(
            rows_transferred=sum(p.result.rows_transferred for p in parts),
            delta_rows_transferred=sum(p.result.delta_rows_transferred for p in parts),
            volume_bytes=sum(p.result.volume_bytes for p in parts),
            max_last_modified=max(highest) if highest else None,
            state=last.result.state,
            rows_deleted=sum(p.result.rows_deleted for p in parts),
            versions_superseded=sum(p.result.versions_superseded for p in parts),
        )
        bounds = ReadBounds(first.planned.bounds.lower, last.planned.bounds.upper,
                            Window(first.planned.bounds.progress.start, last.planned.bounds.progress.end))
        planned = PlannedWindow(last.planned.partition, bounds, True)
        return WindowOutcome(planned, result, last.partition_key, last.into_refresh)


@dataclass
class ModelSummary:
    """Per-model metrics of one transfer, as the CLI prints them."""

    model: str
    status: str = "SUCCESS"
    windows: int = 0
    rows_transferred: int = 0
    delta_rows_transferred: int = 0
    rows_deleted: int = 0
    versions_superseded: int = 0
    volume_bytes: int = 0
    state: ModelState | None = None
    error: str | None = None
    error_type: str | None = None
    blame: str | None = None

    def add(self, outcome: WindowOutcome) -> None:
        self.windows += 1
        self.rows_transferred += outcome.result.rows_transferred
        self.delta_rows_transferred += outcome.result.delta_rows_transferred
        self.rows_deleted += outcome.result.rows_deleted
        self.versions_superseded += outcome.result.versions_superseded
        self.volume_bytes += outcome.result.volume_bytes
        self.state = outcome.result.state

    def fail(self, exc: BaseException) -> None:
        self.status = "ERROR"
        self.error = str(exc)
        self.error_type = type(exc).__name__
        self.blame = getattr(exc, "blame", None)

    def as_dict(self) -> dict[str, Any]:
        state = self.state
        return {
            "model": self.model,
            "status": self.status,
            "windows": self.windows,
            "rows_transferred": self.rows_transferred,
            "delta_rows_transferred": self.delta_rows_transferred,
            "rows_deleted": self.rows_deleted,
            "versions_superseded": self.versions_superseded,
            "volume_transferred_in_mb": round(self.volume_bytes / 1_048_576, 3),
            "watermark": isoformat(state.watermark) if state else None,
            "most_recent_last_updated_at": isoformat(state.high_watermark) if state else None,
            "error": self.error,
        }


def transfer_models(
    request: TransferRequest,
    models: list[ModelConfig],
    summaries: list[ModelSummary],
    *,
    partitions: list[Window] | None = None,
) -> Iterator[tuple[ModelConfig, WindowOutcome]]:
    """Transfer several models to one destination, yielding each committed window as it commits;
    a failing model does not stop the others. Each model's summary is appended to ``summaries``.

    An interrupt (SIGINT: a cancelled Dagster run, ``dagster dev`` stopping, Ctrl-C) stops them
    all with ``KeyboardInterrupt`` before another window starts, even when it landed in a Spark or
    Arrow call and came out as that call's error (PySpark cancels the job on SIGINT) or not at all:
    it is never taken for a failed model. A window is committed whole or not at all.

    A Spark Connect server that stops answering (:class:`SparkServerLost`) fails the model it
    happened in and, at once, every model after it, with the same error: none of them starts, so
    none waits for the server again."""
    interrupted = threading.Event()
    lost: SparkServerLost | None = None
    for model in models:
        summary = ModelSummary(model.model_name)
        summaries.append(summary)
        if lost is not None:
            _fail(request, summary, lost)
            continue
        items = transfer_model(request, model, partitions=partitions)
        try:
            while True:
                if interrupted.is_set():
                    raise KeyboardInterrupt
                with _noticing_interrupts(interrupted):
                    try:
                        item = next(items, _DONE)
                    except Exception as exc:  # the interrupt, come out as a Spark, py4j or Arrow error
                        if interrupted.is_set():
                            raise KeyboardInterrupt from exc
                        raise
                if item is _DONE:
                    break
                if isinstance(item, ModelState):
                    summary.state = item  # the state before, or the state published by a refresh
                    continue
                summary.add(item)
                yield model, item
        except Exception as exc:  # any failure: was it the Spark Connect server's?
            lost = exc if isinstance(exc, SparkServerLost) else server_lost(request.spark, exc)
            if lost is None and not isinstance(exc, TransferPlatformError):
                raise
            _fail(request, summary, lost or exc)


def _fail(request: TransferRequest, summary: ModelSummary, exc: TransferPlatformError) -> None:
    summary.fail(exc)
    log_phase("error", transfer_id=request.transfer_id, destination=request.order.destination,
              model=summary.model, sink=request.log, level=logging.ERROR,
              error_type=type(exc).__name__, blame=exc.blame, error=str(exc))


_DONE = object()


@contextmanager
def _noticing_interrupts(interrupted: threading.Event) -> Iterator[None]:
    """While one window is worked on, note any SIGINT in ``interrupted``, then run the handler in
    place (Dagster's or PySpark's, which raise). Installed per window, around whatever handler is
    current then, and put back only if still ours (Dagster and PySpark swap handlers too)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def notice(signum: int, frame: Any) -> None:
        interrupted.set()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, notice)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is notice:
            signal.signal(signal.SIGINT, previous)


def run_transfer(
    request: TransferRequest,
    models: list[ModelConfig],
    *,
    on_window: Callable[[ModelConfig, WindowOutcome], None] | None = None,
) -> list[ModelSummary]:
    """Transfer several models to one destination; a failing model does not stop the others.
    A recipient none of whose rows was ever delivered, and whose tenant id the sources do not
    hold, gets one warning (:func:`tenant_without_rows`)."""
    summaries: list[ModelSummary] = []
    for model, outcome in transfer_models(request, models, summaries):
        if on_window is not None:
            on_window(model, outcome)
    warning = tenant_without_rows(request, models, summaries)
    if warning is not None:
        request.log.warning(warning)
    return summaries


#: the upper bound of "every row the source holds from the configured start on"
_OPEN_END = datetime(9999, 12, 31, tzinfo=UTC)


def tenant_without_rows(request: TransferRequest, models: list[ModelConfig],
                        summaries: list[ModelSummary]) -> str | None:
    """One warning when models moved no row, the destination has never received one of them,
    and their sources hold no row for the recipient's tenant id from the configured start on:
    a mistyped ``id_in_provider_system`` would otherwise look like a successful transfer. Asked
    (one ``COUNT`` per such model) only while nothing was ever delivered, so incremental
    transfers that find nothing new cost nothing more."""
    destination = request.config.destination(request.order.destination)
    recipient = request.config.recipient(destination.recipient)
    tenant = recipient.id_in_provider_system
    empty = []
    for model, summary in zip(models, summaries, strict=False):
        never = summary.state is None or summary.state.high_watermark is None
        if summary.status != "SUCCESS" or summary.rows_transferred or not never:
            continue
        start = windowing_for(request.config, request.order.destination, model).configured_start
        bounds = ReadBounds(start, _OPEN_END, Window(start, _OPEN_END))
        try:
            rows = reader_for(request.config.source(model.source_name)).count(
                request.spark, ReadRequest(model, tenant, bounds, destination.name))
        except TransferPlatformError:
            continue  # the transfer read this source a moment ago; a failure now is no finding
        if rows == 0:
            empty.append(model)
    if not empty:
        return None
    sources = sorted({m.source_name for m in empty})
    return (f"recipient {recipient.name!r} (id_in_provider_system {tenant!r}) received no row: "
            f"source(s) {', '.join(sources)} hold no row for that tenant id in model(s) "
            f"{', '.join(m.model_name for m in empty)} from the configured start on. If the id is "
            f"mistyped, fix id_in_provider_system of recipient {recipient.name!r}; if the tenant "
            "has no rows yet, nothing is wrong")
