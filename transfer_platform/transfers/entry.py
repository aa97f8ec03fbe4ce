"""One transfer of a destination's models, whoever starts it: the one entry point.

The Dagster asset body, the ``transfer`` job's op, ``transfer-platform transfer`` and the demo
each build a :class:`Transfer` of what was asked (a :class:`TransferOrder`) and hand it only what
they do differently (the hooks: a keep-alive held while models move, told of each planned model
and committed window); the transfer itself is here, once:

- the models, resolved once (:func:`models_of`: a model the destination does not receive is
  a ``ConfigError``, whoever asked for it);
- the destination's writer, opened for the transfer and closed when it ends, however it ends;
- the models moved one after another (:func:`runner.transfer_models`: a failing model does not
  stop the others; an interrupt stops them all);
- each partition's reads added up (:class:`PartitionTally`), yielded as the partition commits;
- the tally (:attr:`Transfer.failed`, :attr:`Transfer.status`, :meth:`Transfer.as_dict`);
- or only the plan (:meth:`Transfer.plan`: the dry run, nothing moved).

Knows nothing of Dagster: ``orchestration/catalog/reporting.py`` turns a transfer into Dagster's events
(``yield from transfer_events(...)``), the command line into progress and a JSON summary.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.lifecycle import ended_status
from transfer_platform.core.windows import Window
from transfer_platform.destinations.base import writer_for
from transfer_platform.errors import ConfigError
from transfer_platform.transfers.dry_run import ModelPlan, plan_transfer
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.outcomes import ModelSummary, PartitionTally, WindowOutcome
from transfer_platform.transfers.runner import TransferRequest, tenant_without_rows, transfer_models
from transfer_platform.tuning import DEFAULT, Tuning

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG = logging.getLogger("transfer_platform.transfer")


def models_of(config: PlatformConfig, destination: str, names: Iterable[str] | None = None) -> list[ModelConfig]:
    """The models a transfer of ``destination`` moves: those of ``names`` (all it receives when
    none is given), in the configuration's order. A name the destination does not receive (not
    a model, or not enabled there) is a ``ConfigError`` naming the ones it does receive."""
    enabled = config.models_for(config.destination(destination))
    wanted = list(names or [])
    if not wanted:
        return enabled
    known = {m.model_name for m in enabled}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise ConfigError(f"destination {destination!r} does not receive model(s) {unknown}; "
                          f"it receives {sorted(known)}")
    return [m for m in enabled if m.model_name in wanted]


@dataclass
class Transfer:
    """One transfer of what ``order`` asks (see the module's doc), at ``now``, with the id
    ``transfer_id``. Its models are resolved when it is made (:func:`models_of`: a model the
    destination does not receive is a ``ConfigError``)."""

    spark: SparkSession
    config: PlatformConfig
    order: TransferOrder
    transfer_id: str
    now: datetime
    tuning: Tuning = DEFAULT
    log: Any = field(default=_LOG)
    # -- hooks: what differs per caller --
    #: held while the models move (Dagster: the run's heartbeat)
    keep_alive: Callable[[], AbstractContextManager[Any]] = nullcontext
    #: told each model's number of planned windows before the first moves (progress displays)
    on_plan: Callable[[str, int], None] | None = None
    #: told of every committed window (progress displays); :meth:`run` yields whole partitions
    on_window: Callable[[ModelConfig, WindowOutcome], None] | None = None
    #: log one warning when nothing was ever delivered and the sources hold no row of the
    #: recipient's tenant id (:func:`runner.tenant_without_rows`)
    warn_if_tenant_empty: bool = True
    #: the models it moves, in the configuration's order
    models: list[ModelConfig] = field(init=False)
    #: each model's summary, appended as the model starts (the last one may be in progress)
    summaries: list[ModelSummary] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.models = models_of(self.config, self.order.destination, self.order.models)

    @property
    def destination(self) -> str:
        return self.order.destination

    def run(self) -> Iterator[tuple[ModelConfig, WindowOutcome]]:
        """Move the models, yielding each partition's outcome once its last read has committed
        (a partition below the one-minute grid is moved in chunks: their sum). A model that
        fails is tallied (:attr:`failed`) and the next one moves; an interrupt or a bug raises.
        The writer is closed (the models' locks released) before this ends, however it ends."""
        destination = self.config.destination(self.destination)
        writer = writer_for(destination, self.tuning)
        request = TransferRequest(
            spark=self.spark, config=self.config, order=self.order, writer=writer, transfer_id=self.transfer_id,
            now=self.now, log=self.log, on_plan=self.on_plan, tuning=self.tuning)
        tallies: dict[str, PartitionTally] = {}
        try:
            with self.keep_alive():
                for model, outcome in transfer_models(request, self.models, self.summaries,
                                                      partitions=_windows(self.order.partitions)):
                    if self.on_window is not None:
                        self.on_window(model, outcome)
                    done = tallies.setdefault(model.model_name, PartitionTally()).add(outcome)
                    if done is not None:
                        yield model, done
            if self.warn_if_tenant_empty:
                warning = tenant_without_rows(request, self.models, self.summaries)
                if warning is not None:
                    self.log.warning(warning)
        finally:
            writer.close()

    def plan(self, on_count: Callable[[str, int], None] | None = None) -> list[ModelPlan]:
        """The dry run: what :meth:`run` would move (``transfers/dry_run.py``), changing nothing.
        ``on_count(model, rows)``: after each window is counted (progress)."""
        order = self.order
        return plan_transfer(self.spark, self.config, order.destination, self.models, self.now,
                             full_refresh=order.full_refresh, start=order.start, end=order.end,
                             partitions=_windows(order.partitions), on_plan=self.on_plan, on_count=on_count)

    @property
    def failed(self) -> list[ModelSummary]:
        return [s for s in self.summaries if s.status != "SUCCESS"]

    @property
    def status(self) -> str:
        """SUCCESS, PARTIAL_FAILURE (some models failed) or ERROR (all did)."""
        failed = len(self.failed)
        return ended_status(len(self.summaries) - failed, failed)

    def as_dict(self) -> dict[str, Any]:
        """The outcome as the command line prints it."""
        return {"transfer_id": self.transfer_id, "destination": self.destination, "status": self.status,
                "models": [s.as_dict() for s in self.summaries]}


def _windows(partitions: tuple[Window, ...] | None) -> list[Window] | None:
    """An order's partitions as the runner takes them."""
    return None if partitions is None else list(partitions)
