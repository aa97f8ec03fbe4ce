"""Self-healing: a failed integrity check is repaired, then checked again.

Evaluated by the ``transfer_schedule`` sensor on each tick, for each enabled destination with
``self_healing: true`` (the default) and each of its models:

1. the model's latest ``integrity`` check evaluation failed and has not been handled: one
   ``transfer`` run per range in its ``repair_windows`` metadata (the windows holding the
   missing, stale or changed rows, ``start``/``end`` set, only that model), and, if it found
   orphaned rows and the model sweeps deletes, a ``delete_sweep`` run. Each run is tagged
   ``transfer_platform/repair_of=<the check's run id>`` and goes through the queue like any
   other. At most ``max_repairs_per_day`` such cycles per model per UTC day;
2. once every run of that cycle has finished: the model's check again (the ``integrity`` job
   with that one check, tagged the same way). Its evaluation is the next "latest": passed, the
   cycle is over; failed, step 1 again (within the daily bound).

The asset's check history shows it: failed -> (repair runs) -> passed. The cursor keeps, per
model, the check run handled last (``repair:<destination>:<model>``) and the day's cycle count
(``repairs:<destination>:<model>`` = ``<date>/<count>``).
"""

from datetime import datetime

from dagster import AssetCheckKey, DagsterInstance, RunRequest, RunsFilter

from transfer_platform.config.models import PlatformConfig
from transfer_platform.core.timeutil import utc
from transfer_platform.orchestration.catalog.checks import (
    CHECK_NAME,
    JOB_NAME,
    integrity_run_config,
)
from transfer_platform.orchestration.catalog.keys import transfer_asset_key
from transfer_platform.orchestration.scheduling.budget import Budget, unlimited
from transfer_platform.orchestration.scheduling.run_tags import (
    PREFIX,
    TRIGGER_TAG,
    limit_tags,
    transfer_run_config,
    transfer_tags,
)
from transfer_platform.orchestration.speed.dagster_internals import check_ended
from transfer_platform.transfers.order import TransferOrder

REPAIR_TAG = f"{PREFIX}/repair_of"
_FINISHED = ("SUCCESS", "FAILURE", "CANCELED")


def latest_checks(instance: DagsterInstance, keys: list[AssetCheckKey]) -> dict:
    """Each check's latest finished evaluation as (run id, passed, metadata), in one query."""
    found = {}
    for key, record in instance.event_log_storage.get_latest_asset_check_execution_by_key(keys).items():
        if check_ended(record):
            evaluation = record.event.dagster_event.event_specific_data
            found[key] = (record.run_id, evaluation.passed, {k: v.value for k, v in evaluation.metadata.items()})
    return found


def _unfinished_repairs(instance: DagsterInstance, check_run_ids: list[str]) -> set[str]:
    """Those of the check runs whose repair runs have not all finished, in one query for all."""
    if not check_run_ids:
        return set()
    records = instance.get_run_records(RunsFilter(tags={REPAIR_TAG: list(dict.fromkeys(check_run_ids))}))
    return {r.dagster_run.tags[REPAIR_TAG] for r in records if r.dagster_run.status.value not in _FINISHED}


def repair_requests(config: PlatformConfig, instance: DagsterInstance, cursor: dict[str, str],
                    now: datetime, budget: Budget | None = None) -> tuple[list[RunRequest], dict[str, str]]:
    """The repair and re-check runs due now, and the cursor entries to keep. Once ``budget`` is
    spent, a model's repair or re-check is left for the next tick (its cursor entries untouched)."""
    budget = budget or unlimited()
    requests: list[RunRequest] = []
    kept = {k: v for k, v in cursor.items() if k.startswith(("repair:", "repairs:"))}
    today = now.date().isoformat()
    healed = [(destination, model,
               AssetCheckKey(transfer_asset_key(destination.recipient, destination.name, model.model_name), CHECK_NAME))
              for destination in config.destinations if destination.is_enabled and destination.self_healing
              for model in config.models_for(destination)]
    latest_of = latest_checks(instance, [key for _, _, key in healed]) if healed else {}
    asked = [latest[0] for destination, model, key in healed
             if (latest := latest_of.get(key)) is not None and not latest[1]
             and kept.get(f"repair:{destination.name}:{model.model_name}") == latest[0]]
    unfinished = _unfinished_repairs(instance, asked)
    for destination, model, key in healed:
        name = f"{destination.name}:{model.model_name}"
        latest = latest_of.get(key)
        if latest is None or latest[1]:
            continue
        run_id, _, metadata = latest
        tags = {REPAIR_TAG: run_id, TRIGGER_TAG: "repair"}
        if budget.spent():
            budget.leave("repair")
            continue
        if kept.get(f"repair:{name}") == run_id:  # repairs asked for: check again once done
            if run_id not in unfinished:
                requests.append(RunRequest(
                    run_key=f"recheck:{name}@{run_id}", job_name=JOB_NAME,
                    run_config=integrity_run_config(destination.name, [model.model_name]),
                    tags={**limit_tags(config, destination.name, [model], "integrity"), **tags}))
            continue
        day, _, count = kept.get(f"repairs:{name}", "").partition("/")
        done = int(count) if day == today else 0
        if done >= destination.max_repairs_per_day:
            continue  # the bound: the check stays failed for a person to look at
        before = len(requests)
        for start, end in metadata.get("repair_windows") or []:
            order = TransferOrder(destination=destination.name, models=[model.model_name],
                                  start=utc(datetime.fromisoformat(start)), end=utc(datetime.fromisoformat(end)),
                                  trigger="repair")
            requests.append(RunRequest(
                run_key=f"repair:{name}@{run_id}:{start}", job_name="transfer", run_config=transfer_run_config(order),
                tags={**transfer_tags(config, order, [model]), REPAIR_TAG: run_id}))
        if metadata.get("orphaned") and model.delete_detection == "sweep":
            requests.append(RunRequest(
                run_key=f"repair-sweep:{name}@{run_id}", job_name="delete_sweep",
                run_config={"ops": {"sweep_deletes": {"config": {
                    "destination": destination.name, "models": [model.model_name]}}}},
                tags={**limit_tags(config, destination.name, [model], "delete_sweep"), **tags}))
        if len(requests) == before:
            continue  # nothing a transfer or a sweep can fix (a destination row newer than the source's)
        kept[f"repair:{name}"] = run_id
        kept[f"repairs:{name}"] = f"{today}/{done + 1}"
    return requests, kept

