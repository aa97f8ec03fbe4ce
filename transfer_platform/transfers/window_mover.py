"""Moving one model's windows, step by step (``transfers/steps.py``), each committed and
reported on its own: a window with no row as its state alone; neighbours read together into this
process as Arrow (by Spark's reader or the source's driver), each committed on its own; a large
window read alone and staged by Spark's executors. Where the model's routes allow
(``transfers/routes.py``), a window of unique keys goes as a COPY stream instead: relayed by
Spark's tasks when alone, streamed by this process when small.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as _compute

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.planning import ModelWindowing, PlannedWindow
from transfer_platform.core.timeutil import isoformat
from transfer_platform.destinations.base import WindowLoad, WindowResult, arrow_schema
from transfer_platform.errors import ConnectionFailure, DataError, DuplicateKey
from transfer_platform.phases import log_phase
from transfer_platform.runtime.connections import spark_error_reason
from transfer_platform.runtime.spark_session import server_lost
from transfer_platform.sources.base import (
    ORIGIN_COLUMN,
    WINDOW_COLUMN,
    ReadRequest,
    SourceReader,
    StreamFailed,
)
from transfer_platform.transfers.outcomes import WindowOutcome
from transfer_platform.transfers.routes import ModelRoutes
from transfer_platform.transfers.steps import steps
from transfer_platform.transfers.versions import conflict_of, latest_versions, latest_versions_frame

if TYPE_CHECKING:
    from transfer_platform.transfers.runner import TransferRequest

_LOG = logging.getLogger("transfer_platform.transfer")
pc: Any = _compute  # pyarrow.compute's functions are made at import time: a type checker sees none
NO_ROUTES = ModelRoutes()


class WindowMover:
    """Moves one model's windows for :func:`~transfer_platform.transfers.runner.transfer_model`,
    each committed and reported on its own, by the routes picked for the model."""

    def __init__(self, request: TransferRequest, model: ModelConfig, reader: SourceReader,
                 windowing: ModelWindowing, refreshing: bool, ids: dict[str, Any],
                 routes: ModelRoutes = NO_ROUTES) -> None:
        self.request, self.model, self.reader, self.routes = request, model, reader, routes
        self.direct = routes.direct  # neighbouring windows read by the source's driver
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
        """Move the windows of one step of :func:`~.steps.steps` or :func:`~.steps.unknown_steps`."""
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
        if self.routes.copy and self._keys_unique:
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
        proven = self.routes.proven
        assert proven is not None  # the relay is a route of the proven driver reads
        bounds = window.bounds
        slices = self.request.config.source(self.model.source_name).max_concurrent_queries_per_transfer
        log_phase("read", **self.ids, read_from=bounds.lower, read_until=bounds.upper, relayed=True, slices=slices)
        relay = proven.relay(read, slices)
        with self._spark_errors(bounds.lower, bounds.upper):
            result = self.request.writer.write_relayed(relay, self.request.spark, self._load(window))
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
        how: dict[str, Any] = {"direct": True} if self.direct is not None else {}
        if streams:
            how.update(relayed=True, streamed=True)
        log_phase("read", **self.ids, read_from=lower, read_until=upper, windows=len(windows), **how)
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
            for step, indices in steps(iter(sizes), self.request.tuning):
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
        directly, relayed (``ModelRoutes.streams``), from a source holding each key once."""
        if self.direct is None or not self.routes.streams:
            return False
        if self._keys_unique is None:
            self._keys_unique = self.direct.keys_unique(read)
        return self._keys_unique

    def _streamed(self, window: PlannedWindow, read: ReadRequest) -> WindowOutcome | None:
        """The window streamed (:meth:`_streams`), then committed as any window; ``None`` if the
        source failed meanwhile (nothing committed: the window is then read as any other, after a
        warning naming the failure)."""
        direct = self.direct
        assert direct is not None
        try:
            result = self.request.writer.write_streamed(lambda types: direct.copy_out(read, types), self._load(window))
        except StreamFailed as failed:  # said: the read again costs a source connection and time
            _LOG.debug("streaming the window failed", exc_info=True)
            log_phase("stream", **self.ids, level=logging.WARNING, failed=str(failed), read_again=True,
                      read_from=window.bounds.lower, read_until=window.bounds.upper)
            return None
        self._log_load(result, read_from=window.bounds.lower, read_until=window.bounds.upper, relayed=True)
        return self._outcome(window, result)

    def _read_directly(self, reads: list[ReadRequest], up_to: int | None) -> pa.Table | None:
        """The windows' rows read by the source database's driver (:attr:`Route.DRIVER`);
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
            stall = self.reader.stall_of(exc)  # a database source that stopped answering
            if stall is not None:
                raise stall from None
            raise DataError(
                f"reading or staging the window {isoformat(lower)} <= last_modified < "
                f"{isoformat(upper)} failed: {spark_error_reason(exc)}",
                model=self.model.model_name, destination=self.request.order.destination,
                fix="check that each column's data_type matches the source values, that the "
                    "primary key columns hold no NULLs and that source_query runs",
            ) from None


def _cancelled(exc: BaseException) -> bool:
    """Whether a Spark error is the cancellation of the job (PySpark's SIGINT handler cancels
    every job): an interrupt, never a reason to read again."""
    return "cancel" in str(exc).lower()
