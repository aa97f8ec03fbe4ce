"""Transfers as a user scripts them: enqueue, list with status and metrics, cancel.

A transfer is a Dagster run carrying ``transfer_platform/kind=transfer``: a run of the
``transfer`` job (sensor, ``transfer --enqueue``, the launchpad) or of transfer assets (the UI's
Materialize, backfills). Enqueueing goes through the instance's run coordinator, like the UI, so
the queue's limits apply. Listing reads the runs and their events from the instance: status
(:func:`transfer_platform.orchestration.runs.lifecycle.transfer_status`), timestamps, window, tags and
per-model metrics summed over the windows each run committed.

Listing is one query for the page of runs (Dagster's run storage filters on the kind, destination,
user tags, the Dagster statuses a transfer status maps onto, and creation/update times) and one
event read per run of that page (the page's materializations, step outcomes and ``last_transfer``
check evaluations). Statuses Dagster does not know (KILLED vs CANCELLED, PARTIAL_FAILURE vs ERROR,
EXPIRED, ORPHANED) and the end-time bounds are checked on the fetched runs; pages are read until
the page is full, so a page is never short while more transfers match. A page's cursor is the
last run it holds: the next page starts after it, whatever was recorded since.
"""


import os
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

from transfer_platform.config.models import PlatformConfig
from transfer_platform.core.lifecycle import (
    MODELS_SUCCEEDED_TAG,
    ORPHANED_TAG,
    STATUSES,
    first_line,
    transfer_status,
)
from transfer_platform.errors import ConfigError, ConnectionFailure, Problem
from transfer_platform.orchestration.runs.workspaces import WORKSPACE_ENV, OpenWorkspaces
from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    DRY_RUN_TAG,
    FULL_REFRESH_TAG,
    KIND_TAG,
    MODELS_TAG,
    TRIGGER_TAG,
    USER_TAG_PREFIX,
    limit_tags,
    transfer_op_config,
    transfer_run_config,
    transfer_tags,
    user_tags_of,
)
from transfer_platform.transfers.order import TransferOrder

RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
PARTITION_TAG = "dagster/partition"


def workspace_file() -> Path:
    """The workspace the daemon and webserver load (``$TRANSFER_PLATFORM_WORKSPACE``, else the
    repository's ``workspace.yaml``)."""
    if os.environ.get(WORKSPACE_ENV):
        return Path(os.environ[WORKSPACE_ENV])
    return Path(__file__).resolve().parents[3] / "workspace.yaml"


#: workspace fields holding a path, relative to the workspace file's folder
_PATH_FIELDS = ("working_directory", "relative_path", "python_file", "executable_path")


def location_entry(workspace: Path, recipient: str) -> dict | None:
    """The code location of ``workspace`` a run for ``recipient`` is created in: None when the
    workspace has one (or cannot be read: Dagster reports it as it loads it); else the one
    ``load_from`` entry of ``transfer_platform.definitions`` that holds the recipient (a shard
    attribute ``defs_shard_<i>_of_<n>`` whose share holds it, or a location of every recipient; a
    code server started beside the webserver, a ``grpc_server`` entry, is asked what it serves),
    its paths made absolute, so that only that location is loaded and the run is that location's,
    as the daemon and the UI see it. A workspace whose locations cannot be told apart (several
    holding the recipient) is refused with the fix: point $TRANSFER_PLATFORM_WORKSPACE at a
    workspace of that one location."""
    try:
        raw = yaml.safe_load(workspace.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    entries = raw.get("load_from") or []
    if len(entries) <= 1:
        return None
    holding = [entry for entry in entries if _holds(entry, recipient, workspace)]
    if len(holding) != 1:
        names = [_location_name(entry) for entry in (holding or entries)]
        raise ConfigError([Problem(
            str(workspace), f"recipient {recipient!r} is held by {len(holding) or 'none'} of its code locations "
            f"that a run can be made in ({', '.join(names)}): the run's location cannot be chosen",
            f"give each location a shard attribute (defs_shard_<i>_of_<n>, deploy/workspace.sharded.yaml), or "
            f"set ${WORKSPACE_ENV} to a workspace of the location that holds recipient {recipient!r}")])
    return _absolute(holding[0], workspace.parent)


def _entry_fields(entry: dict) -> dict:
    """The fields of one ``load_from`` entry (``{python_module: {...}}``; a bare module name too)."""
    kind, value = next(iter(entry.items()))
    return value if isinstance(value, dict) else {"module_name" if kind == "python_module" else kind: value}


def _holds(entry: dict, recipient: str, workspace: Path) -> bool:
    from transfer_platform.config.shards import Shard, shard_of

    served = _served(entry, workspace)
    if len(served) != 1 or served[0][0] != "transfer_platform.definitions":
        return False  # another code, or a server of several definitions
    match = re.fullmatch(r"defs_shard_(\d+)_of_(\d+)", str(served[0][1] or ""))
    if match is None:
        return True  # every recipient
    shard = Shard(int(match.group(1)), int(match.group(2)))
    return shard.count > shard.index and shard_of(recipient, shard.count) == shard.index


def _served(entry: dict, workspace: Path) -> list[tuple[str | None, str | None]]:
    """(module, attribute) of what a ``load_from`` entry serves: a ``python_module`` entry says it;
    a ``grpc_server`` entry (a code server started beside the webserver, e.g. ``dagster code-server
    start -m transfer_platform.definitions -a defs_shard_0_of_4``) is asked; other entries: none."""
    from transfer_platform.orchestration.speed import dagster_internals

    kind, fields = next(iter(entry)), _entry_fields(entry)
    if kind == "python_module":
        return [(fields.get("module_name"), fields.get("attribute"))]
    if kind != "grpc_server":
        return []
    host, port, socket = str(fields.get("host") or "localhost"), fields.get("port"), fields.get("socket")
    try:
        pointers = dagster_internals.served_code_pointers(host, port, socket)
    except dagster_internals.UnsupportedDagsterError:
        raise
    except Exception as exc:  # noqa: BLE001 -- whatever the gRPC client raises: named, with the fix
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ConnectionFailure(f"the code server of location {_location_name(entry)!r} in {workspace}",
                                host=host, port=port or socket, reason=reason,
                                fix="start that code server (docs/operations.md, \"Code servers beside the "
                                    "webserver\") or take its entry out of the workspace, then ask again") from None
    return [(getattr(p, "module", None), getattr(p, "fn_name", None)) for p in pointers]


def _location_name(entry: dict) -> str:
    fields = _entry_fields(entry)
    return str(fields.get("location_name") or fields.get("attribute") or fields.get("module_name") or next(iter(entry)))


def _absolute(entry: dict, base: Path) -> dict:
    kind, value = next(iter(entry.items()))
    if not isinstance(value, dict):
        return {kind: str(base / value) if kind == "python_file" else value}
    return {kind: {k: (str(base / v) if k in _PATH_FIELDS and isinstance(v, str) and not Path(v).is_absolute()
                       else v) for k, v in value.items()}}


def enqueue(instance: DagsterInstance, config: PlatformConfig, config_path: Path, order: TransferOrder, *,
            workspaces: OpenWorkspaces | None = None) -> str:
    """Submit a run of the ``transfer`` job asked ``order`` to the instance's queue; returns the
    transfer id. ``workspaces``: the code locations kept by a long-lived caller (the API); without,
    the location is loaded for this run only."""
    from transfer_platform.transfers.entry import models_of

    destination = config.destination(order.destination)
    models = models_of(config, destination.name, order.models)
    return _launch(instance, workspaces, config_path, destination.recipient, "transfer",
                   transfer_run_config(order, stating_defaults=True), transfer_tags(config, order, models))


def _launch(instance: DagsterInstance, workspaces: OpenWorkspaces | None, config_path: Path, recipient: str,
            job_name: str, run_config: dict, tags: dict) -> str:
    run_id = str(uuid.uuid4())
    workspace = workspace_file()
    entry = location_entry(workspace, recipient)
    if workspaces is not None:
        workspaces.create_run(workspace, entry, config_path, job_name, run_config, tags, run_id)
    else:
        with OpenWorkspaces(instance) as once:
            once.create_run(workspace, entry, config_path, job_name, run_config, tags, run_id)
    return run_id


def cancel(instance: DagsterInstance, run_id: str) -> str:
    """Cancel a pending transfer (CANCELLED) or stop a running one (KILLED); returns the status."""
    run = instance.get_run_by_id(run_id)
    if run is None or run.tags.get(KIND_TAG) not in ("transfer", "integrity"):
        raise LookupError(f"no transfer with id {run_id!r} (see `transfer-platform transfers`)")
    instance.run_coordinator.cancel_run(run_id)
    return describe(instance, instance.get_run_record_by_id(run_id))["status"]


def get_transfer(instance: DagsterInstance, run_id: str) -> dict[str, Any] | None:
    """One transfer by id (None when no transfer run has it)."""
    record = instance.get_run_record_by_id(run_id)
    if record is None or record.dagster_run.tags.get(KIND_TAG) != "transfer":
        return None
    return describe(instance, record)


def _window(run) -> tuple[str | None, str | None]:  # a DagsterRun
    op_config = transfer_op_config(run.run_config)
    if op_config:
        return op_config.get("start"), op_config.get("end")
    if RANGE_START_TAG in run.tags:
        return run.tags[RANGE_START_TAG], run.tags[RANGE_END_TAG]
    if PARTITION_TAG in run.tags:
        return run.tags[PARTITION_TAG], run.tags[PARTITION_TAG]
    return None, None


def _moment(timestamp: float | None) -> str | None:
    return None if timestamp is None else datetime.fromtimestamp(timestamp, UTC).isoformat()


#: the events a transfer's description reads off its run
_EVENT_TYPES = {DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.STEP_FAILURE,
                DagsterEventType.STEP_SUCCESS, DagsterEventType.ASSET_CHECK_EVALUATION}
LAST_TRANSFER_CHECK = "last_transfer"  # orchestration.catalog.last_transfer.CHECK_NAME (not imported: light)


def events_of(instance: DagsterInstance, run_ids: list[str]) -> dict[str, list]:
    """The events :func:`describe` reads, of each of ``run_ids``: one indexed read per run (Dagster's
    public event API has no filter by several runs); with the pooled connection of
    :func:`open_for_listing` ~0.4 ms each, and most of a page's time is deserializing them.
    Threads do not help: the pool keeps one connection, each overflow one is opened anew."""
    return {run_id: instance.get_records_for_run(run_id, of_type=_EVENT_TYPES).records for run_id in run_ids}


def open_for_listing(instance: DagsterInstance) -> DagsterInstance:
    """An instance kept open by a long-lived process (the API): hold pooled connections rather
    than one connection per query, as Dagster's webserver does (statement timeout 15 s)."""
    instance.optimize_for_webserver(statement_timeout=15_000, pool_recycle=3600, max_overflow=20)
    return instance


#: Dagster's errors around what a step raised (the step's error is their cause)
_WRAPPERS = ("DagsterExecutionStepExecutionError", "DagsterUserCodeExecutionError")


def _said(error) -> str:  # a SerializableErrorInfo
    """The first line of what an error said, without the ``module.Class: `` Python puts first."""
    text = (error.message.strip().splitlines() or [error.cls_name])[0]
    head, colon, rest = text.partition(": ")
    return rest if colon and head.split(".")[-1] == error.cls_name else text


def _model_errors(evaluations: list) -> dict[str, dict[str, Any]]:
    """Each model's latest ``last_transfer`` outcome in the run that failed: code, title, blame."""
    found: dict[str, dict[str, Any]] = {}
    for data in evaluations:
        if data.check_name != LAST_TRANSFER_CHECK or data.passed:
            continue
        metadata = {k: v.value for k, v in data.metadata.items()}
        message = str(metadata.get("error") or data.description or "")
        found[data.asset_key.path[-1]] = {
            "model": data.asset_key.path[-1], "status": metadata.get("status"),
            "error_code": metadata.get("error_type") or metadata.get("status") or "ERROR",
            "title": first_line(message) or str(data.description or ""),
            "blame": metadata.get("blame") or ("platform" if metadata.get("status") != "KILLED" else None),
            "message": message}
    return found


def describe(instance: DagsterInstance, record, events: list | None = None) -> dict[str, Any]:  # a RunRecord
    """One transfer as ``transfer-platform transfers`` and the API show it. ``events``: the run's
    events (:func:`events_of`), read here when not given."""
    run = record.dagster_run
    if events is None:
        events = events_of(instance, [run.run_id])[run.run_id]
    models: dict[str, dict[str, Any]] = {}
    steps_succeeded = 0
    errors = []
    evaluations = []
    for event in events:
        dagster_event = event.event_log_entry.dagster_event
        if dagster_event.event_type == DagsterEventType.STEP_SUCCESS:
            steps_succeeded += 1
        elif dagster_event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
            evaluations.append(dagster_event.asset_check_evaluation_data)
        elif dagster_event.event_type == DagsterEventType.STEP_FAILURE:
            data = dagster_event.step_failure_data
            error = data.error
            while error is not None and error.cls_name in _WRAPPERS and error.cause is not None:
                error = error.cause  # Dagster's wrapper of what the step raised: what it raised
            text = (data.user_failure_data.description if data.user_failure_data else None) or (
                _said(error) if error else "failed")
            errors.append({"step": dagster_event.step_key, "error": text,
                           "error_code": (error.cls_name if error else None) or "Failure",
                           "title": first_line(text), "blame": "platform"})
        else:
            materialization = dagster_event.step_materialization_data.materialization
            metadata = {k: v.value for k, v in materialization.metadata.items()}
            model = models.setdefault(materialization.asset_key.path[-1], _no_metrics())
            model["windows"] += 1
            for name, kind in _COUNTS.items():
                model[name] += kind(metadata.get(name, 0))
            latest = metadata.get("most_recent_last_updated_at")
            if latest is not None:
                model["most_recent_last_updated_at"] = max(model["most_recent_last_updated_at"] or 0, latest)
    for model in models.values():
        model["volume_transferred_in_mb"] = round(model["volume_transferred_in_mb"], 4)
        if model["most_recent_last_updated_at"] is not None:
            model["most_recent_last_updated_at"] = _moment(model["most_recent_last_updated_at"])
    model_errors = list(_model_errors(evaluations).values())
    if model_errors:  # the step's error is about its models: the first failed one's code and blame
        for error in errors:
            error.update(error_code=model_errors[0]["error_code"], blame=model_errors[0]["blame"])
    start, end = _window(run)
    requested = [m for m in run.tags.get(MODELS_TAG, "").split(",") if m]
    full_refresh = run.tags.get(FULL_REFRESH_TAG) == "true" or bool(transfer_op_config(run.run_config).get("full_refresh"))
    return {
        "id": run.run_id,
        "destination": run.tags.get(DESTINATION_TAG),
        "status": _status(record, steps_succeeded if errors else 0),
        "full_refresh": full_refresh,
        "is_full_refresh": full_refresh,  # Prequel's name
        "is_debug_mode": run.tags.get(DRY_RUN_TAG) == "true" or bool(transfer_op_config(run.run_config).get("dry_run")),
        "requested_models": requested,
        "start_transfer_window_at": start,
        "end_transfer_window_at": end,
        "submitted_at": record.create_timestamp.astimezone(UTC).isoformat(),
        "started_at": _moment(record.start_time),
        "ended_at": _moment(record.end_time),
        **{name: sum(m[name] for m in models.values()) for name in _COUNTS},
        "volume_transferred_in_mb": round(sum(m["volume_transferred_in_mb"] for m in models.values()), 4),
        "tags": user_tags_of(dict(run.tags)),
        "models": models,
        "errors": errors,  # each failed step: its error, code, title (first line) and blame
        "model_errors": model_errors,  # each failed model (its last_transfer outcome): the same
        "model_metrics": model_metrics(models, model_errors, requested),
    }


def model_metrics(models: dict[str, dict[str, Any]], model_errors: list[dict[str, Any]],
                  requested: list[str]) -> list[dict[str, Any]]:
    """Prequel's ``model_metrics``: one entry per model the transfer delivered, failed or was asked
    for, with its counts (None where nothing was recorded: a model that failed or has not run
    yet has no count, rather than a zero it did not measure) and its error (code, title, blame)."""
    errors = {e["model"]: e for e in model_errors}
    entries = []
    for name in dict.fromkeys([*models, *errors, *requested]):
        counts = models.get(name)
        error = errors.get(name)
        entries.append({
            "model_name": name,
            "status": "ERROR" if error else ("SUCCESS" if counts else None),
            "rows_transferred": counts["rows_transferred"] if counts else None,
            "delta_rows_transferred": counts["delta_rows_transferred"] if counts else None,
            "volume_transferred_in_mb": counts["volume_transferred_in_mb"] if counts else None,
            "most_recent_last_updated_at": counts["most_recent_last_updated_at"] if counts else None,
            "error": {"error_code": error["error_code"], "title": error["title"], "blame": error["blame"]}
            if error else None})
    return entries


#: each model's counts, summed over the windows a transfer committed (its materializations' metadata)
_COUNTS = {"rows_transferred": int, "delta_rows_transferred": int, "rows_deleted": int, "versions_superseded": int,
           "volume_transferred_in_mb": float}


def _no_metrics() -> dict[str, Any]:
    return {"windows": 0, **{name: kind() for name, kind in _COUNTS.items()}, "most_recent_last_updated_at": None}


def _status(record, steps_succeeded: int = 0) -> str:
    run = record.dagster_run
    return transfer_status(run.status.value, dict(run.tags), started=record.start_time is not None,
                           steps_succeeded=steps_succeeded)


#: the Dagster run statuses each transfer status can be read off (the rest is told by tags)
DAGSTER_STATUSES: dict[str, list[DagsterRunStatus]] = {
    "PENDING": [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.MANAGED],
    "RUNNING": [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING],
    "SUCCESS": [DagsterRunStatus.SUCCESS],
    "CANCELLED": [DagsterRunStatus.CANCELED],
    "KILLED": [DagsterRunStatus.CANCELED],
    "EXPIRED": [DagsterRunStatus.CANCELED],
    "ERROR": [DagsterRunStatus.FAILURE],
    "PARTIAL_FAILURE": [DagsterRunStatus.FAILURE],
    "ORPHANED": [DagsterRunStatus.FAILURE],
}
_ENDED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
#: runs fetched per query while a page fills (more than a page: filters may drop some)
_BATCH = 200


@dataclass(frozen=True)
class TransferFilter:
    destination: str | None = None
    status: str | None = None
    tags: dict[str, str] = field(default_factory=dict)  # the user's tags, key -> value
    ended_before: datetime | None = None  # exclusive
    ended_after: datetime | None = None  # inclusive
    limit: int = 100


@dataclass(frozen=True)
class Page:
    transfers: list[dict[str, Any]]
    next_cursor: str | None  # the last transfer of the page, when more match after it


def _runs_filter(wanted: TransferFilter) -> RunsFilter | None:
    """The query of the runs that may match (None: none can, e.g. PENDING and ended)."""
    run_tags: dict[str, Any] = {}
    if wanted.destination:
        run_tags[DESTINATION_TAG] = wanted.destination
    for key, value in wanted.tags.items():
        run_tags[USER_TAG_PREFIX + key] = value
    if not run_tags:  # else the kind is checked on the runs found: each tag is one more join of
        run_tags[KIND_TAG] = "transfer"  # run_tags, and this one matches nearly every run
    statuses = DAGSTER_STATUSES[wanted.status] if wanted.status else None
    if wanted.ended_before is not None or wanted.ended_after is not None:
        statuses = [s for s in (statuses or _ENDED) if s in _ENDED]
        if not statuses:
            return None
    # a run that ended at t was created before t and last updated at t or later
    slack = timedelta(seconds=1)  # the stored times' rounding: the exact bounds are checked after
    created_before = wanted.ended_before + slack if wanted.ended_before is not None else None
    updated_after = wanted.ended_after - slack if wanted.ended_after is not None else None
    return RunsFilter(tags=run_tags, statuses=statuses, created_before=created_before,
                      updated_after=updated_after)


def _matches(record, wanted: TransferFilter) -> bool:
    ended = record.end_time
    before = wanted.ended_before is None or (ended is not None and ended < wanted.ended_before.timestamp())
    after = wanted.ended_after is None or (ended is not None and ended >= wanted.ended_after.timestamp())
    return before and after


def page_transfers(instance: DagsterInstance, wanted: TransferFilter, cursor: str | None = None) -> Page:
    """The ``wanted.limit`` newest transfers matching ``wanted`` after ``cursor`` (a transfer id
    a previous page ended with), described, and the cursor of the next page (None: no more)."""
    if wanted.status is not None and wanted.status not in DAGSTER_STATUSES:
        raise ValueError(f"unknown status {wanted.status!r}; expected one of {list(STATUSES)}")
    runs_filter = _runs_filter(wanted)
    if runs_filter is None:
        return Page([], None)
    exact = wanted.status in (None, "PENDING", "RUNNING", "SUCCESS")  # the Dagster status says it all
    checked_after = (not exact or wanted.ended_before is not None or wanted.ended_after is not None
                     or KIND_TAG not in runs_filter.tags)
    batch_size = max(_BATCH, wanted.limit + 1) if checked_after else wanted.limit + 1  # +1: is there more?
    chosen: list = []
    scanned_to, more = cursor, True
    while len(chosen) <= wanted.limit and more:
        batch = instance.get_run_records(runs_filter, limit=batch_size, cursor=scanned_to)
        more = len(batch) == batch_size
        for record in batch:
            scanned_to = record.dagster_run.run_id
            if record.dagster_run.tags.get(KIND_TAG) == "transfer" and _matches(record, wanted) and (exact or _status_of(instance, record) == wanted.status):
                chosen.append(record)
                if len(chosen) > wanted.limit:
                    break
    has_next = len(chosen) > wanted.limit
    chosen = chosen[:wanted.limit]
    events = events_of(instance, [r.dagster_run.run_id for r in chosen])
    found = [describe(instance, r, events[r.dagster_run.run_id]) for r in chosen]
    return Page(found, chosen[-1].dagster_run.run_id if has_next and chosen else None)


def _status_of(instance: DagsterInstance, record) -> str:
    """The transfer status :func:`describe` gives ``record``, its events read only when the tags
    cannot tell (a failed run of asset steps without the transfer's model counts)."""
    tags = record.dagster_run.tags
    if (record.dagster_run.status == DagsterRunStatus.FAILURE and MODELS_SUCCEEDED_TAG not in tags
            and ORPHANED_TAG not in tags):
        return describe(instance, record)["status"]
    return _status(record)


def list_transfers(instance: DagsterInstance, wanted: TransferFilter) -> list[dict[str, Any]]:
    """The first page of :func:`page_transfers` (``wanted.limit`` transfers, newest first)."""
    return page_transfers(instance, wanted).transfers


def enqueue_integrity(instance: DagsterInstance, config: PlatformConfig, config_path: Path, destination_name: str,
                      *, trigger: str = "cli", workspaces: OpenWorkspaces | None = None) -> str:
    """Submit a run of the ``integrity`` job checking every model of one destination, tagged as the
    sensor tags it."""
    from transfer_platform.orchestration.catalog.checks import JOB_NAME, integrity_run_config

    destination = config.destination(destination_name)
    models = config.models_for(destination)
    if not models:
        raise ConfigError(f"destination {destination.name!r} receives no enabled model: nothing to check")
    tags = {**limit_tags(config, destination.name, models, "integrity"), TRIGGER_TAG: trigger}
    return _launch(instance, workspaces, config_path, destination.recipient, JOB_NAME,
                   integrity_run_config(destination.name), tags)


def integrity_results(instance: DagsterInstance, config: PlatformConfig, destination_name: str) -> list[dict[str, Any]]:
    """The latest ``integrity`` check evaluation of each model of a destination (None: never checked)."""
    from dagster import AssetCheckKey

    from transfer_platform.orchestration.catalog.checks import CHECK_NAME
    from transfer_platform.orchestration.catalog.keys import transfer_asset_key

    destination = config.destination(destination_name)
    keys = {m.model_name: AssetCheckKey(transfer_asset_key(destination.recipient, destination.name, m.model_name),
                                        CHECK_NAME) for m in config.models_for(destination)}
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(list(keys.values()))
    results = []
    for model, key in keys.items():
        record = latest.get(key)
        entry = {"model": model, "status": "NOT_RUN", "run_id": None, "checked_at": None, "passed": None}
        if record is not None:
            entry.update(status=record.status.value, run_id=record.run_id,
                         checked_at=_moment(record.create_timestamp))
            event = record.event.dagster_event if record.event is not None else None
            if event is not None and event.event_type_value == "ASSET_CHECK_EVALUATION":
                data = event.asset_check_evaluation_data
                metadata = {k: v.value for k, v in data.metadata.items()}
                entry.update(passed=data.passed, description=data.description,
                             error_code=metadata.pop("error_type", None), blame=metadata.pop("blame", None),
                             counts={k: v for k, v in metadata.items() if isinstance(v, int)
                                     and not isinstance(v, bool)},
                             horizon=metadata.get("horizon"), watermark=metadata.get("watermark"))
        results.append(entry)
    return results
