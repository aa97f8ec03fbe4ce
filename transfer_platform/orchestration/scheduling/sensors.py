"""The sensor that enqueues incremental transfers, and keeps the lifecycle honest.

One sensor reads the configuration (it scales better than a schedule per destination) and, for
each destination with ``is_enabled: true``, requests a run of the ``transfer`` job at every tick
of its ``frequency_minutes`` (aligned to midnight UTC; see :mod:`transfer_platform.core.schedule`).
The run key ``<destination>@<tick>`` makes the daemon drop a second request for the same tick; the
cursor remembers the last tick enqueued per destination, so after downtime the missed ticks are
caught up by one transfer. A disabled destination is never requested. When more than
``FIRST_RUNS_PER_TICK`` (50) destinations are new at one tick (a fleet onboarded at once, a fresh
instance), their first runs are spread (:func:`first_runs_at`): the daemon creates a tick's runs
one after another, and 1,000 at once made one tick of minutes. Runs go through the queue
(the run coordinator adds the limit tags), so a transfer that cannot start waits as PENDING.

It also enqueues, on their own frequencies and through the same queue: the ``delete_sweep`` job
of each model with ``delete_detection: sweep`` (``delete_sweep_frequency_minutes``), and the
``integrity`` job with every check of a destination (``integrity_check_frequency_minutes``,
daily by default) once the destination has had a successful transfer run (its first backfill is
complete). Their cursor entries are ``sweep:<destination>:<model>`` and
``integrity:<destination>``; a due integrity tick waits, unrecorded, until that first success.

And it repairs what failed integrity checks found (``orchestration/scheduling/repair.py``): the windows holding
the broken rows are transferred again, then the check runs again.

Each tick also runs the lifecycle sweep: pending transfers older than 6 hours are cancelled
(EXPIRED), running ones without a heartbeat are failed (ORPHANED). Old runs are deleted by a
sensor of their own (:mod:`.retention`).

A tick reads the run storage in a fixed number of queries, however many destinations there are
(which are delivered: one query for all; known for good once their check was requested), and works
within a time budget (:mod:`.budget`): what it could not do in time is logged and left for the next.
"""


import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from dagster import (
    AssetsDefinition,
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    Failure,
    GraphDefinition,
    JobDefinition,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    op,
    sensor,
)

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.shards import does_instance_upkeep, parse_shard
from transfer_platform.core.schedule import DEFAULT_FREQUENCY_MINUTES, due
from transfer_platform.core.timeutil import isoformat
from transfer_platform.orchestration.catalog.checks import (
    JOB_NAME,
    integrity_job,
    integrity_run_config,
)
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.orchestration.jobs.delete_sweep_job import KIND as SWEEP_KIND
from transfer_platform.orchestration.jobs.delete_sweep_job import delete_sweep_job
from transfer_platform.orchestration.jobs.transfer_job import transfer_job
from transfer_platform.orchestration.runs.lifecycle import sweep
from transfer_platform.orchestration.scheduling.budget import Budget, unlimited
from transfer_platform.orchestration.scheduling.repair import repair_requests
from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    HIDDEN_PREFIX,
    KIND_TAG,
    SCHEDULED_FOR_TAG,
    TRIGGER_TAG,
    limit_tags,
    transfer_run_config,
    transfer_tags,
)
from transfer_platform.orchestration.speed import dagster_internals
from transfer_platform.transfers.order import TransferOrder

MISSED_TICKS_TAG = f"{HIDDEN_PREFIX}/missed_ticks"
#: the sensor's interval: a destination created through the API (no reload needed: the resource's
#: configuration follows the store) gets its first run at the next tick, which with Dagster's
#: daemon loop and the tick's own work must stay within the minute the API promises
TICK_SECONDS = 30


#: new destinations (no cursor entry) whose first runs one tick requests at once; when more are
#: new at one tick (a fleet onboarded at once, a fresh instance), their first runs are spread
#: (:func:`first_runs_at`) so that no tick creates thousands of runs (the daemon creates each
#: run one after another: 1,000 runs at once is minutes of one tick)
FIRST_RUNS_PER_TICK = 50
#: a new destination's planned first run, in the cursor until it is requested
FIRST_PREFIX = "first:"


def first_runs_at(frequencies: dict[str, int], now: datetime) -> dict[str, datetime]:
    """When each of the new destinations ``frequencies`` (name -> ``frequency_minutes``, in
    configuration order) gets its first run: at ``now`` when they are at most
    :data:`FIRST_RUNS_PER_TICK`; else in groups of :data:`FIRST_RUNS_PER_TICK`, the k-th group of
    ``g = ceil(n / FIRST_RUNS_PER_TICK)`` at ``now + span * k / g``, ``span`` the destination's
    frequency period or, if shorter, the ``g`` ticks the groups need (``g * TICK_SECONDS``): the
    first group at once, one group a tick after it, every first run within the frequency's first
    period (a daily destination's within minutes)."""
    if len(frequencies) <= FIRST_RUNS_PER_TICK:
        return dict.fromkeys(frequencies, now)
    groups = -(-len(frequencies) // FIRST_RUNS_PER_TICK)
    planned = {}
    for index, (name, minutes) in enumerate(frequencies.items()):
        span = min(timedelta(minutes=minutes or DEFAULT_FREQUENCY_MINUTES), timedelta(seconds=groups * TICK_SECONDS))
        planned[name] = now + span * (index // FIRST_RUNS_PER_TICK) / groups
    return planned


def schedule_requests(config: PlatformConfig, cursor: dict[str, str], now: datetime,
                      budget: Budget | None = None) -> tuple[list[RunRequest], dict[str, str]]:
    """The run requests due at ``now`` and the new cursor (destination -> last tick enqueued;
    ``first:<destination>`` -> the planned first run of a new destination not requested yet,
    :func:`first_runs_at`). Once ``budget`` is spent, a due destination is left for the next
    tick (cursor untouched)."""
    budget = budget or unlimited()
    requests, new_cursor = [], {}
    enabled = [d for d in config.destinations if d.is_enabled]
    planned = {d.name: datetime.fromisoformat(cursor[FIRST_PREFIX + d.name]) for d in enabled
               if not cursor.get(d.name) and cursor.get(FIRST_PREFIX + d.name)}
    planned.update(first_runs_at({d.name: d.frequency_minutes for d in enabled
                                  if not cursor.get(d.name) and d.name not in planned}, now))
    for destination in enabled:
        last = cursor.get(destination.name)
        last_tick = datetime.fromisoformat(last) if last else None
        new_cursor[destination.name] = last or ""
        if last_tick is None and planned[destination.name] > now:
            new_cursor[FIRST_PREFIX + destination.name] = isoformat(planned[destination.name])
            continue
        when = due(destination.frequency_minutes, last_tick, now)
        if when is None:
            continue
        if budget.spent():
            budget.leave("transfer")
            if cursor.get(FIRST_PREFIX + destination.name):  # a spread first run stays planned
                new_cursor[FIRST_PREFIX + destination.name] = cursor[FIRST_PREFIX + destination.name]
            continue
        order = TransferOrder(destination=destination.name, tick=when.tick, trigger="sensor")
        tags = {**transfer_tags(config, order, config.models_for(destination)), MISSED_TICKS_TAG: str(when.missed)}
        requests.append(RunRequest(
            run_key=f"{destination.name}@{isoformat(when.tick)}", job_name="transfer",
            run_config=transfer_run_config(order), tags=tags,
        ))
        new_cursor[destination.name] = isoformat(when.tick)
    return requests, {k: v for k, v in new_cursor.items() if v}


def upkeep_requests(config: PlatformConfig, cursor: dict[str, str], now: datetime,
                    delivered: Callable[[str], bool], budget: Budget | None = None
                    ) -> tuple[list[RunRequest], dict[str, str]]:
    """The delete sweeps and integrity checks due at ``now``, and their cursor entries.
    ``delivered(destination)``: its first transfer has succeeded (integrity checks wait for it).
    It is asked only about destinations whose check is due and was never requested (a cursor
    entry ``integrity:<destination>`` means it was delivered when the check was first requested),
    all at once when it has ``among(names) -> set`` (:func:`has_succeeded`: one query).
    Once ``budget`` is spent, a due run is left for the next tick (cursor entry untouched)."""
    budget = budget or unlimited()
    requests, new_cursor = [], {}
    enabled = [d for d in config.destinations if d.is_enabled]
    waiting = [d.name for d in enabled
               if d.integrity_check_frequency_minutes and config.models_for(d)
               and not cursor.get(f"integrity:{d.name}")
               and due(d.integrity_check_frequency_minutes, None, now) is not None]
    among = getattr(delivered, "among", None)
    known = among(waiting) if among else {name for name in waiting if delivered(name)}
    for destination in enabled:
        due_runs = [(f"sweep:{destination.name}:{m.model_name}", m.delete_sweep_frequency_minutes, [m])
                    for m in config.models_for(destination) if m.delete_detection == "sweep"]
        if destination.integrity_check_frequency_minutes and config.models_for(destination):
            due_runs.append((f"integrity:{destination.name}", destination.integrity_check_frequency_minutes,
                             config.models_for(destination)))
        for key, frequency, models in due_runs:
            last = cursor.get(key)
            if last:
                new_cursor[key] = last
            when = due(frequency, datetime.fromisoformat(last) if last else None, now)
            if when is None:
                continue
            integrity = key.startswith("integrity:")
            if integrity and not last and destination.name not in known:
                continue  # after the first completed backfill
            if budget.spent():
                budget.leave("integrity check" if integrity else "delete sweep")
                continue
            kind = "integrity" if integrity else SWEEP_KIND
            tags = {**limit_tags(config, destination.name, models, kind),
                    SCHEDULED_FOR_TAG: isoformat(when.tick), TRIGGER_TAG: "sensor"}
            if integrity:
                requests.append(RunRequest(run_key=f"{key}@{isoformat(when.tick)}", job_name=JOB_NAME, tags=tags,
                                           run_config=integrity_run_config(destination.name)))
            else:
                requests.append(RunRequest(
                    run_key=f"{key}@{isoformat(when.tick)}", job_name=delete_sweep_job.name, tags=tags,
                    run_config={"ops": {"sweep_deletes": {"config": {
                        "destination": destination.name, "models": [models[0].model_name]}}}}))
            new_cursor[key] = isoformat(when.tick)
    return requests, new_cursor


#: runs read per query when looking for destinations' first successful transfer
DELIVERED_PAGE = 5000  # each query costs mostly its filter over every destination: fewer, larger pages


class has_succeeded:  # a function that became a class; called as before
    """Whether a destination has had a successful transfer run (its backfill is complete).
    ``among(names)``: those of ``names`` that have, in as few run-storage queries as the answer
    needs (newest runs first, ``DELIVERED_PAGE`` at a time, each query only about the
    destinations not found yet), never one query per destination. Once ``budget`` is spent, no
    further page is read: the destinations not found yet count as not delivered this tick (their
    checks wait for the next) and are counted as left."""

    def __init__(self, instance: DagsterInstance, page: int = DELIVERED_PAGE, budget: Budget | None = None) -> None:
        self.instance, self.page, self.budget = instance, page, budget or unlimited()

    def __call__(self, destination: str) -> bool:
        return destination in self.among([destination])

    def among(self, names: list[str]) -> set[str]:
        found: set[str] = set()
        rest = list(dict.fromkeys(names))
        while rest:
            records = self.instance.get_run_records(RunsFilter(
                tags={KIND_TAG: "transfer", DESTINATION_TAG: rest}, statuses=[DagsterRunStatus.SUCCESS]),
                limit=self.page)
            found |= {r.dagster_run.tags.get(DESTINATION_TAG) for r in records} & set(rest)
            if len(records) < self.page:
                break
            rest = [name for name in rest if name not in found]
            if rest and self.budget.spent():
                self.budget.leave("destination whose first success to look up", len(rest))
                break
        return found


#: the job that lists the transfer assets for the UI (:func:`transfer_assets_jobs`)
ASSETS_JOB_NAME = "transfer_assets"


def transfer_assets_jobs(assets: list[AssetsDefinition]) -> list[JobDefinition]:
    """The transfer assets listed as one job's, ``transfer_assets``, for the UI: the sensor names it
    among its targets, so each transfer asset's page shows the sensor as its automation, with its
    next tick (Dagster lists a sensor there when one of its jobs lists the asset; the ``transfer``
    job, which the sensor's runs are of and which records the assets' materializations, is an op
    job and lists none). The job lists the assets as Dagster lists assets materialized outside its
    asset jobs (``dagster_internals.assets_listed_by``): it builds no second asset job of every
    asset, which cost each code location a fifth of its CPU. Launched, it moves nothing and fails
    naming what to launch instead. No job on a Dagster lacking the listing (the assets' pages then
    show no automation; the sensor still moves them)."""
    if dagster_internals.fallback("asset_automation") is not None:
        return []

    @op(name=f"{ASSETS_JOB_NAME}_list", description="moves nothing: fails naming what to launch")
    def _refuse() -> None:
        raise Failure(description=(
            f"{ASSETS_JOB_NAME} lists the transfer assets for the UI and moves nothing: materialize them "
            "from their asset pages or their group's lineage (Materialize), launch the transfer job with "
            "its destination, or run `transfer-platform transfer <destination>`"))

    return [JobDefinition(
        graph_def=GraphDefinition(name=ASSETS_JOB_NAME, node_defs=[_refuse]), name=ASSETS_JOB_NAME,
        description="the transfer assets, listed for the UI: the transfer_schedule sensor keeps them up "
                    "to date through the transfer job; materialize them from their pages",
        asset_layer=dagster_internals.assets_listed_by([key for definition in assets for key in definition.keys]))]


def transfer_schedule_sensor(asset_jobs: list[JobDefinition]) -> SensorDefinition:
    """The sensor, with the jobs it launches and ``asset_jobs`` (:func:`transfer_assets_jobs`)."""
    return sensor(
        name="transfer_schedule", jobs=[transfer_job, delete_sweep_job, integrity_job, *asset_jobs],
        minimum_interval_seconds=TICK_SECONDS, default_status=DefaultSensorStatus.RUNNING,
        description="Enqueues each enabled destination's incremental transfer on its frequency "
                    "(aligned to midnight UTC), its delete sweeps and integrity checks on theirs; "
                    "cancels transfers pending > 6 h, fails orphaned ones.")(evaluate_schedule)


def evaluate_schedule(context: SensorEvaluationContext, platform: TransferPlatformResource) -> SensorResult:
    now, budget = datetime.now(UTC), Budget()
    cursor = json.loads(context.cursor) if context.cursor else {}
    requests, new_cursor = schedule_requests(platform.config, cursor, now, budget)
    upkeep, upkeep_cursor = upkeep_requests(platform.config, cursor, now, has_succeeded(context.instance, budget=budget),
                                            budget)
    repairs, repair_cursor = repair_requests(platform.config, context.instance, cursor, now, budget)
    # instance-wide (every transfer run): one code location does it, the unsharded one or shard 0
    upkeep_here = does_instance_upkeep(parse_shard(platform.shard, where="TransferPlatformResource.shard"))
    swept = sweep(context.instance, now, platform.config, budget) if upkeep_here else {}
    for kind, run_ids in swept.items():
        for run_id in run_ids:
            context.log.warning(f"transfer {run_id} {kind}")
    requests, new_cursor = requests + upkeep + repairs, {**new_cursor, **upkeep_cursor, **repair_cursor}
    left = budget.summary()
    if left:
        context.log.warning(left)
    if not requests:
        return SensorResult(skip_reason=SkipReason(left or "no destination is due"), cursor=json.dumps(new_cursor))
    return SensorResult(run_requests=requests, cursor=json.dumps(new_cursor, sort_keys=True))
