"""One-call transfers: a transfer of a destination's models (the runner, as a Dagster run calls it),
a full refresh window by window.
"""

from __future__ import annotations

from datetime import datetime

from transfer_platform.config.models import PlatformConfig
from transfer_platform.destinations.base import writer_for
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.outcomes import ModelSummary, WindowOutcome
from transfer_platform.transfers.runner import TransferRequest, run_transfer, transfer_model
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.events import MODEL


def transfer(spark, config: PlatformConfig, now: datetime, transfer_id: str = "t1",
             destination: str = DESTINATION, *, full_refresh: bool = False, tuning: Tuning = DEFAULT) -> ModelSummary:
    """One transfer of the destination's models; returns the (single) model's summary."""
    dest = config.destination(destination)
    writer = writer_for(dest, tuning)
    try:
        summaries = run_transfer(
            TransferRequest(spark=spark, config=config,
                            order=TransferOrder(destination=destination, full_refresh=full_refresh),
                            writer=writer, transfer_id=transfer_id, now=now, tuning=tuning),
            config.models_for(dest),
        )
    finally:
        writer.close()
    (summary,) = summaries
    return summary


def refresh_step_by_step(spark, config: PlatformConfig, now, on_window, tuning: Tuning = DEFAULT,
                         transfer_id: str = "refresh1") -> list:
    """Run a full refresh, calling ``on_window()`` after each window has committed aside; its items."""
    writer = writer_for(config.destination(DESTINATION), tuning)
    request = TransferRequest(spark=spark, config=config,
                              order=TransferOrder(destination=DESTINATION, full_refresh=True), writer=writer,
                              transfer_id=transfer_id, now=now, tuning=tuning)
    items = []
    try:
        for item in transfer_model(request, config.model(MODEL)):
            items.append(item)
            if isinstance(item, WindowOutcome):
                on_window()
    finally:
        writer.close()
    return items
