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
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.planning import ModelWindowing, plan_transfer_windows, windowing_for
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.destinations.base import DestinationWriter
from transfer_platform.errors import TransferPlatformError
from transfer_platform.phases import log_phase
from transfer_platform.runtime.spark_session import SparkServerLost, server_lost
from transfer_platform.sources.base import ReadRequest, SourceReader, reader_for
from transfer_platform.sources.shared_reads import StagedReader, TransferStaging, next_lower
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.outcomes import ModelSummary, WindowOutcome
from transfer_platform.transfers.routes import ModelRoutes, routes_for
from transfer_platform.transfers.staged_plans import planned_up_to, staged_plan, staging_for
from transfer_platform.transfers.steps import steps, unknown_steps, window_rows
from transfer_platform.transfers.window_mover import WindowMover
from transfer_platform.tuning import DEFAULT, Tuning

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from transfer_platform.sources.base import TenantsReader

_LOG = logging.getLogger("transfer_platform.transfer")


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
    staging = staging_for(request, model, partitions)
    # a source has staging only where its reader reads tenants together (PostgreSQL's, MySQL's)
    staged = None if staging is None else staging.joined(cast("TenantsReader", reader))
    source_request = request
    if staged is not None:  # this tick's batch lists this destination: its rows are staged
        request = planned_up_to(request, staged)
    # the read proven on the source as it is (columns, kinds, casts; no row read) before the
    # writer's prepare creates, alters or drops anything: a mistyped model changes nothing. The
    # routes picked for the model may prove it on the database's driver (its columns read as they
    # are); that answer shows the source reachable, else the source is checked (a named refusal) first
    proof = ReadRequest(model, recipient.id_in_provider_system, proof_bounds(windowing, request.now), destination.name)
    routes = routes_for(reader, request.writer, proof, request.tuning, staged=staged is not None)
    if routes.proven is None:
        if staged is None:
            reader.check(destination.name)
        (staged or reader).check_read(request.spark, proof)
    try:
        yield from _transfer_model(request, source_request, model, destination, recipient, windowing, ids, reader,
                                   staging, staged, partitions, routes)
    finally:
        routes.close()


def _transfer_model(request: TransferRequest, source_request: TransferRequest, model: ModelConfig,
                    destination: Any, recipient: Any, windowing: ModelWindowing, ids: dict[str, Any],
                    reader: SourceReader, staging: TransferStaging | None, staged: StagedReader | None,
                    partitions: list[Window] | None, routes: ModelRoutes) -> Iterator[ModelState | WindowOutcome]:
    """:func:`transfer_model` once the read is proven: the writer prepared, the windows moved."""
    prepared = request.writer.prepare(model, request.transfer_id, full_refresh=request.order.full_refresh)
    for change in prepared.schema_changes:
        log_phase("schema", **ids, level=logging.WARNING, change=change)
    state = prepared.refresh if prepared.refresh is not None else prepared.state
    refreshing = prepared.refresh is not None
    yield state
    planned = plan_transfer_windows(windowing, now=request.now, state=state, refreshing=refreshing,
                                    partitions=partitions, start=request.order.start, end=request.order.end)
    if staging is not None:
        request, planned, staged = staged_plan(source_request, request, windowing, state, refreshing,
                                               planned, staging, staged, reader)
    batch: dict[str, Any] = {"staged_batch": staged.batch.name} if staged is not None else {}
    log_phase("plan", **ids, windows=len(planned), kind="full_refresh" if refreshing else "incremental",
              built_aside=refreshing, watermark=state.watermark, **batch)
    if request.on_plan is not None:
        request.on_plan(model.model_name, len(planned))
    reads = [ReadRequest(model, recipient.id_in_provider_system, w.bounds, destination.name) for w in planned]
    read_with = staged or reader
    # a staged batch is read from the staging, never by another route of the source
    routes = routes if staged is None else ModelRoutes()
    move = WindowMover(request, model, read_with, windowing, refreshing, ids, routes)
    tuning = request.tuning
    counter = routes.direct or read_with  # the driver's: on its connection
    moves = (steps(window_rows(counter, request.spark, reads, tuning), tuning) if read_with.counts_without_spark
             else unknown_steps(len(reads), tuning))
    last = state
    for step, indices in moves:
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


def proof_bounds(windowing: ModelWindowing, now: datetime) -> ReadBounds:
    """Bounds for :meth:`SourceReader.check_read`: any would do (no row is read); the configured
    range up to ``now``, so that the query is the one a transfer sends."""
    start = windowing.configured_start
    end = max(now, start + timedelta(seconds=1))
    return ReadBounds(start, end, Window(start, end))


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
                        item = next(items, None)  # never an item
                    except Exception as exc:  # the interrupt, come out as a Spark, py4j or Arrow error
                        if interrupted.is_set():
                            raise KeyboardInterrupt from exc
                        raise
                if item is None:
                    break
                if isinstance(item, ModelState):
                    summary.state = item  # the state before, or the state published by a refresh
                    continue
                summary.add(item)
                yield model, item
        except Exception as exc:  # any failure: was it the Spark Connect server's?
            lost = exc if isinstance(exc, SparkServerLost) else server_lost(request.spark, exc)
            if lost is not None:
                _fail(request, summary, lost)
            elif isinstance(exc, TransferPlatformError):
                _fail(request, summary, exc)
            else:
                raise


def _fail(request: TransferRequest, summary: ModelSummary, exc: TransferPlatformError) -> None:
    summary.fail(exc)
    log_phase("error", transfer_id=request.transfer_id, destination=request.order.destination,
              model=summary.model, sink=request.log, level=logging.ERROR,
              error_type=type(exc).__name__, blame=exc.blame, error=str(exc))



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
