"""What a transfer is asked to do, whoever asks: the one shape of a transfer request.

``transfer-platform transfer`` (run here, or ``--enqueue``), the REST API's ``POST
/destinations/{id}/transfer``, the schedule sensor and its repairs, the ``transfer`` job's op and
the transfer assets each turn what they were given into a :class:`TransferOrder` at their edge
(the API's JSON body, the command line's arguments, Dagster's run config and tags:
``orchestration/scheduling/run_tags.py`` converts both ways); the transfer itself
(:class:`transfer_platform.transfers.entry.Transfer`) and the queue
(:func:`transfer_platform.orchestration.runs.transfers.enqueue`) take nothing else.

Pure: no Dagster, no Spark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from transfer_platform.core.windows import Window

#: who asks for a transfer (the run tag ``trigger``): the command line, the REST API, the
#: schedule sensor, the self-healing repairs, Dagster itself (the UI's Materialize, a backfill)
TRIGGERS = ("cli", "api", "sensor", "repair", "dagster")


@dataclass(frozen=True)
class TransferOrder:
    """One transfer of a destination's models, as asked.

    ``models`` empty: every model the destination receives. ``start``/``end`` bound the windows
    (Prequel's ``start_transfer_window_at``, inclusive, and ``end_transfer_window_at``,
    exclusive); ``partitions``: only these windows (a partitioned Dagster run's), ``None``: as
    planned from the watermark. ``dry_run``: only plan (Prequel's ``is_debug_mode``): move and
    record nothing. ``tick``: the schedule tick the transfer belongs to (source staging: the
    transfers of one tick share a read), ``None``: the one holding the transfer's "now".
    ``tags``: the user's own labels (already validated)."""

    destination: str
    models: tuple[str, ...] = ()
    full_refresh: bool = False
    start: datetime | None = None
    end: datetime | None = None
    partitions: tuple[Window, ...] | None = None
    dry_run: bool = False
    tick: datetime | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    trigger: str = "cli"

    def __post_init__(self) -> None:
        # the caller's list and dict copied: an order does not change with what it was made from
        object.__setattr__(self, "models", tuple(self.models or ()))
        object.__setattr__(self, "tags", dict(self.tags))
        if self.partitions is not None:
            object.__setattr__(self, "partitions", tuple(self.partitions))
        if self.trigger not in TRIGGERS:
            raise ValueError(f"unknown trigger {self.trigger!r}; expected one of {TRIGGERS}")
