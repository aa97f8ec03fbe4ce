"""A run coordinator that puts the configuration's limits on every run, whoever launched it.

Dagster's run-queue limits only see *run* tags, and a run launched from the UI's Materialize
button or a UI backfill carries none of ours. Every launch path (the UI, backfills, sensors,
``transfer-platform transfer --enqueue``) goes through the instance's run coordinator, so this
subclass of ``QueuedRunCoordinator`` (configured in ``dagster.yaml``; importable by the webserver
and the daemon) works out which destination, models and sources a run touches and adds the tags
of :mod:`transfer_platform.orchestration.scheduling.run_tags` before the run is queued. The daemon asks it
for the queue's rules at every pass, and it answers with the rules ``dagster.yaml`` gives plus the
ones generated from the configuration, so the limits follow the file.

A run it cannot place (assets of several destinations in one run, a configuration that does not
load) is refused at submission with a message saying why: limits fail closed.

On a Dagster lacking a private name it uses (:mod:`~transfer_platform.orchestration.speed.dagster_internals`)
it is Dagster's ``QueuedRunCoordinator``, with one warning naming the name and what is lost: the
configuration's rules are passed through Dagster's own ``tag_concurrency_limits`` when it starts
(a configuration that does not load then holds every queued run: ``max_concurrent_runs: 0``), and
submitted runs are queued as they come (runs launched from the UI carry no limit tags). A
fractional ``dequeue_interval_seconds`` is the coordinator's own (the property the daemon reads),
on any Dagster.

When the webserver or the daemon starts it, it installs the epoch tick fix of
:mod:`~transfer_platform.orchestration.speed.dagster_fixes`, so that they compute the partition keys the
code server computes.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from dagster import DagsterRun, QueuedRunCoordinator, SubmitRunContext

from transfer_platform.config.loading import load_config
from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import find_config_path
from transfer_platform.errors import ConfigError
from transfer_platform.orchestration.catalog.keys import destination_and_model
from transfer_platform.orchestration.scheduling.config_stamp import config_stamp
from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    INTEGRITY_OP,
    KIND_TAG,
    MODELS_TAG,
    limit_tags,
    op_config,
    queue_rules,
    transfer_op_config,
)
from transfer_platform.orchestration.speed import dagster_fixes, dagster_internals, queue_wake

if TYPE_CHECKING:
    from transfer_platform.orchestration.speed.dagster_internals import RunQueueConfig

_LOG = logging.getLogger("transfer_platform.coordinator")
TRANSFER_JOB = "transfer"
SWEEP_JOB = "delete_sweep"
INTEGRITY_JOB = "integrity"
INTEGRITY_CHECK = "integrity"  # checks.CHECK_NAME (a last_transfer check runs with its transfer)


class RunPlacementError(Exception):
    """A run that the limits cannot describe."""


#: the configuration file of the runs submitted in this context, when their submitter names its own
#: (the API serves the file it was started with, whatever $TRANSFER_PLATFORM_CONFIG says); else the
#: process's ($TRANSFER_PLATFORM_CONFIG, else ./transfer_platform.yaml)
_SUBMITTED_UNDER: ContextVar[str | None] = ContextVar("transfer_platform_submitted_under", default=None)


@contextmanager
def placed_under(config_path: str | os.PathLike[str]) -> Iterator[None]:
    """Runs submitted inside are placed under the limits of ``config_path``."""
    token = _SUBMITTED_UNDER.set(str(config_path))
    try:
        yield
    finally:
        _SUBMITTED_UNDER.reset(token)


def _config() -> PlatformConfig:
    path = find_config_path(_SUBMITTED_UNDER.get())
    stamp = config_stamp(path)  # the file's modification time and the store's version
    cached = _CACHE.get(str(path))
    if cached is None or cached[0] != stamp:
        cached = (stamp, load_config(path))
        _CACHE[str(path)] = cached
    return cached[1]


_CACHE: dict[str, tuple[tuple, PlatformConfig]] = {}


def placement(config: PlatformConfig, run: DagsterRun) -> tuple[str, list[str], str] | None:
    """(destination, models, kind) of a run, or None for a run that is none of ours."""
    tags = run.tags
    if DESTINATION_TAG in tags and KIND_TAG in tags:
        models = [m for m in tags.get(MODELS_TAG, "").split(",") if m]
        return tags[DESTINATION_TAG], models, tags[KIND_TAG]
    if run.job_name == TRANSFER_JOB:
        transfer = transfer_op_config(run.run_config)
        destination = transfer.get("destination")
        if not destination:
            raise RunPlacementError("a transfer run needs ops.run_transfer.config.destination")
        return destination, list(transfer.get("models") or []), "transfer"
    if run.job_name == SWEEP_JOB:  # launched by hand (the sensor's runs carry their tags)
        sweep = op_config(run.run_config, "sweep_deletes")
        if not sweep.get("destination"):
            raise RunPlacementError("a delete sweep run needs ops.sweep_deletes.config.destination")
        destination = config.destination(sweep["destination"])
        models = sweep.get("models") or [m.model_name for m in config.models_for(destination)
                                         if m.delete_detection == "sweep"]
        return destination.name, list(models), "delete_sweep"
    if run.job_name == INTEGRITY_JOB:  # launched by hand (the sensor's and the API's runs carry their tags)
        checks = op_config(run.run_config, INTEGRITY_OP)
        if not checks.get("destination"):
            raise RunPlacementError(f"an integrity run needs ops.{INTEGRITY_OP}.config.destination")
        return checks["destination"], list(checks.get("models") or []), "integrity"
    keys = list(run.asset_selection or [])
    kind = "transfer"
    if not keys and run.asset_check_selection:  # `Execute checks` on assets: their integrity checks
        keys = [check.asset_key for check in run.asset_check_selection]
        kind = "integrity"
    touched: dict[str, list[str]] = {}
    for key in keys:
        placed = destination_and_model(config, key)  # <recipient>/<destination>/<model>
        if placed is not None:
            touched.setdefault(placed[0], []).append(placed[1])
    if not touched:
        return None
    if len(touched) > 1:
        raise RunPlacementError(
            f"this run selects assets of several destinations ({', '.join(sorted(touched))}); "
            "a run transfers to one destination so that its limits hold. Select one destination's "
            "assets per run (its group: a backfill launched per group makes one run per destination)")
    ((destination, models),) = touched.items()
    return destination, models, kind


def tags_for(config: PlatformConfig, run: DagsterRun) -> dict[str, str]:
    placed = placement(config, run)
    if placed is None:
        return {}
    destination_name, model_names, kind = placed
    from transfer_platform.transfers.entry import models_of  # the transfer core: loaded when needed

    try:
        models = models_of(config, destination_name, model_names)
    except ConfigError as exc:  # a model the destination does not receive
        raise RunPlacementError(exc.problems[0].message) from None
    integrity = any(check.name == INTEGRITY_CHECK for check in run.asset_check_selection or ())
    return limit_tags(config, destination_name, models, kind, with_checks=kind == "transfer" and integrity)


class TransferRunCoordinator(dagster_internals.KeptInstance, QueuedRunCoordinator):
    """``QueuedRunCoordinator`` + the configuration's tags and limits (see the module docstring).

    ``dequeue_interval_seconds`` may be a fraction here (Dagster's schema takes whole seconds).
    With PostgreSQL run storage the queue is also passed over as soon as a run is queued or ends
    (:mod:`~transfer_platform.orchestration.speed.queue_wake`): the interval is then only the longest a
    run waits when a notification was lost.

    ``pooled_storage_connections`` (the shipped ``dagster.yaml`` sets it): the process that opens
    the instance keeps its storage connections open (one per storage, more while threads
    query at once) instead of dagster-postgres's new PostgreSQL connection per query, as
    dagster-webserver does (``DagsterInstance.optimize_for_webserver``, without a statement
    timeout). The daemon's sensor tick makes ~20 storage queries per run it creates; their
    connections were half of its time (``benchmarks/scale_runs.py``: 1,000 runs in ~30 s, not ~130 s).
    """

    #: connections opened beyond the one kept per storage while threads query at once (the
    #: daemon's threads); they close when returned
    POOL_OVERFLOW = 20
    POOL_RECYCLE_SECONDS = 3600

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # QueuedRunCoordinator's
        #: a Dagster lacking what the coordinator uses: it is Dagster's own (warned once)
        self.dagsters_own = dagster_internals.fallback("coordinator")
        dagster_fixes.install_epoch_fix()  # the webserver's and the daemon's partition keys, as the code server's
        super().__init__(*args, **kwargs)

    @classmethod
    def config_type(cls) -> dict:
        from dagster import Field

        return {**super().config_type(), "dequeue_interval_seconds": Field(
            float, is_required=False,
            description="Seconds between the daemon's passes over the run queue (fractions allowed)."),
            "pooled_storage_connections": Field(
                bool, is_required=False, default_value=False,
                description="Keep the instance's storage connections open (pooled) in every process "
                            "that opens it, instead of a new connection per query.")}

    @classmethod
    def from_config_value(cls, inst_data, config_value):  # Dagster's signature
        interval = config_value.get("dequeue_interval_seconds")
        if interval is not None and interval <= 0:
            raise ValueError(f"run_coordinator.config.dequeue_interval_seconds must be > 0, got {interval}")
        pooled = bool(config_value.get("pooled_storage_connections"))
        rest = {k: v for k, v in config_value.items() if k != "pooled_storage_connections"}
        # Dagster's schema takes whole seconds: the fraction is kept here, the property returns it
        rest["dequeue_interval_seconds"] = None if interval is None else max(1, math.ceil(interval))
        if dagster_internals.fallback("coordinator"):
            rest = _with_configured_limits(rest)
        coordinator = super().from_config_value(inst_data, rest)
        coordinator.pooled_storage_connections = pooled
        coordinator.fractional_dequeue_interval = interval
        return coordinator

    pooled_storage_connections = False
    fractional_dequeue_interval: float | None = None

    @property
    def configured_dequeue_interval_seconds(self) -> float:
        """``dequeue_interval_seconds`` as ``dagster.yaml`` gives it, fractions kept (Dagster's default: 5)."""
        if self.fractional_dequeue_interval is not None:
            return self.fractional_dequeue_interval
        return super().dequeue_interval_seconds

    @property
    def dequeue_interval_seconds(self) -> float:
        """What the daemon reads once, creating its run queue daemon: 0, as the queue's pass
        itself waits for a queued run or the interval (:mod:`~transfer_platform.orchestration.
        queue_wake`, installed here), or the interval where this Dagster lacks the pass."""
        if dagster_internals.install_prompt_queue_pass():
            return 0
        return self.configured_dequeue_interval_seconds

    def register_instance(self, instance) -> None:  # Dagster's, when the instance is opened
        super().register_instance(instance)
        # every process whose instance has this coordinator: the daemon, its run workers, the
        # webserver, the command line
        dagster_internals.remember_run_columns(instance.run_storage)
        dagster_fixes.install_workspace_refresh()  # the daemon's: it alone refreshes its workspace
        # the webserver pools by itself, with its own statement timeout (--db-statement-timeout),
        # which this must not replace
        if self.pooled_storage_connections and "dagster_webserver" not in sys.modules:
            instance.optimize_for_webserver(statement_timeout=0, pool_recycle=self.POOL_RECYCLE_SECONDS,
                                            max_overflow=self.POOL_OVERFLOW)

    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        if self.dagsters_own:
            return super().submit_run(context)
        run = context.dagster_run
        instance = self.platform_instance
        try:
            tags = tags_for(_config(), run)
        except Exception as exc:  # any failure refuses the run, with its reason
            message = f"transfer_platform cannot place run {run.run_id} under its limits: {exc}"
            instance.report_engine_event(message, run)
            instance.report_run_failed(run, message)
            raise RunPlacementError(message) from exc
        missing = {k: v for k, v in tags.items() if run.tags.get(k) != v}
        if missing:
            instance.add_run_tags(run.run_id, missing)
            run = instance.get_run_by_id(run.run_id) or run
        queued = super().submit_run(SubmitRunContext(run, context.workspace))
        queue_wake.notify(instance)  # the daemon's queue passes now, not at its next interval
        return queued

    def get_run_queue_config(self) -> RunQueueConfig:
        base = super().get_run_queue_config()
        if self.dagsters_own:  # the configuration's rules are in base, from when it started
            return base
        try:
            generated = queue_rules(_config())
        except Exception:
            _LOG.exception("cannot load the transfer_platform configuration; queued runs wait")
            raise
        return dagster_internals.with_tag_limits(base, generated)


def _with_configured_limits(config_value: dict) -> dict:
    """Dagster's own ``QueuedRunCoordinator`` configuration with the configuration's tag rules after
    ``dagster.yaml``'s (read now, once); a configuration that does not load holds every queued run."""
    try:
        generated = queue_rules(_config())
    except Exception as exc:  # noqa: BLE001 - fail closed, and keep the daemon running
        dagster_internals.warn_once("coordinator:config", (
            f"transfer_platform's run coordinator cannot load the configuration ({exc}): no queued run "
            "starts (max_concurrent_runs 0) until the process restarts with a configuration that loads"))
        return {**config_value, "max_concurrent_runs": 0}
    return {**config_value, "tag_concurrency_limits": [*(config_value.get("tag_concurrency_limits") or []),
                                                       *generated]}
