"""A transfer's plan with source staging (``sources/shared_reads.py``): whether it may read a
batch of its tick, and the windows it then moves, up to the batch's upper bound."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, cast

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.planning import ModelWindowing, PlannedWindow, plan_transfer_windows
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import Window
from transfer_platform.sources.base import SourceReader, TenantsReader
from transfer_platform.sources.shared_reads import StagedReader, TransferStaging

if TYPE_CHECKING:
    from transfer_platform.transfers.runner import TransferRequest


def staging_for(request: TransferRequest, model: ModelConfig,
                partitions: list[Window] | None) -> TransferStaging | None:
    """Source staging for a plain incremental transfer (not a full refresh asked for, nor
    explicit windows or partitions) of a model whose source stages reads, else ``None``."""
    order = request.order
    if order.full_refresh or order.start is not None or order.end is not None or partitions is not None:
        return None
    return TransferStaging.for_transfer(request.config, model, request.order.destination, request.now, request.log,
                                        tick=order.tick)


def planned_up_to(request: TransferRequest, staged: StagedReader) -> TransferRequest:
    """The transfer planned up to the batch's upper bound at most (its watermark stops there)."""
    upper = staged.batch.upper
    return request if request.now <= upper else replace(request, now=upper)


def staged_plan(source_request: TransferRequest, request: TransferRequest, windowing: ModelWindowing,
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
    joined = staging.create_or_join(request.spark, cast(TenantsReader, reader), min(w.bounds.lower for w in planned), request.now)
    if joined is None:
        return request, planned, None
    staged_request = planned_up_to(request, joined)
    staged_planned = plan(staged_request) if staged_request is not request else planned
    if covers(joined, staged_planned):
        return staged_request, staged_planned, joined
    staging.release(joined)
    return request, planned, None
