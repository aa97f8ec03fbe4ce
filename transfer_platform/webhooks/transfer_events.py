"""Events of finished runs: one ``transfer.<status>`` per finished transfer run (SUCCESS, ERROR,
PARTIAL_FAILURE, EXPIRED, ORPHANED; not CANCELLED or KILLED, a user's own doing) and one
``integrity_check.failed`` per integrity run with a failed check, written to the outbox by the
daemon's ``transfer_events`` sensor (:mod:`.sensors`), never by the run itself.

The sensor reads the run storage by update time after its cursor (Dagster's public
``get_run_records`` with ``updated_after``), so a run counts when it ends, and again if it is
updated later: each event's ``dedup_key`` (``transfer.error:<run id>``) keeps it to one. A failed
run waits for the lifecycle sweep (:mod:`transfer_platform.orchestration.runs.lifecycle`, same code
location) to tell a dead worker (ORPHANED) from an error, at most :data:`SETTLE` after it ended.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunRecord, RunsFilter

from transfer_platform.core.lifecycle import ORPHANED_TAG, first_line
from transfer_platform.orchestration.runs.lifecycle import SWEPT_TAG
from transfer_platform.orchestration.runs.transfers import describe
from transfer_platform.orchestration.scheduling.run_tags import DESTINATION_TAG, KIND_TAG
from transfer_platform.store import events as outbox
from transfer_platform.store.tables import events
from transfer_platform.webhooks.event_types import INTEGRITY_CHECK_FAILED, TRANSFER_EVENTS

FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
#: how long a failed run waits for the sweep's verdict (ORPHANED or not) before it is reported
SETTLE = timedelta(minutes=5)
#: how far back the first tick looks (older runs finished before webhooks were there)
FIRST_LOOKBACK = timedelta(hours=1)
#: runs updated this recently are left for the next tick (a write may not be committed yet)
SAFETY = timedelta(seconds=2)
PAGE = 500
LAST_TRANSFER_CHECK = "last_transfer"
_WHY = {"EXPIRED": "pending for more than 6 hours without starting: the run queue's limits or a stopped "
                   "dagster-daemon kept it waiting; it was cancelled",
        "ORPHANED": "the run's worker died without a word (no heartbeat); the next transfer cleans what it "
                    "left in staging and resumes"}


@dataclass
class Cursor:
    after: datetime
    held: list[str] = field(default_factory=list)  # failed runs waiting for the sweep

    @classmethod
    def parse(cls, text: str | None, now: datetime) -> Cursor:
        if not text:
            return cls(after=now - FIRST_LOOKBACK)
        value = json.loads(text)
        return cls(after=datetime.fromisoformat(value["after"]), held=list(value.get("held", [])))

    def text(self) -> str:
        return json.dumps({"after": self.after.isoformat(), "held": self.held})


def _aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@dataclass
class Recorded:
    cursor: str
    emitted: list[str] = field(default_factory=list)  # dedup keys of the events written
    held: int = 0


def record_run_events(instance: DagsterInstance, engine: sa.Engine, cursor: str | None, now: datetime,
                      recipient_of=lambda destination: None) -> Recorded:
    """Write the events of the runs finished since ``cursor``; returns the next cursor.
    ``recipient_of``: destination name -> recipient name (when the run's assets do not say)."""
    state = Cursor.parse(cursor, now)
    page = instance.get_run_records(
        RunsFilter(statuses=FINISHED, tags={KIND_TAG: ["transfer", "integrity"]},
                   updated_after=state.after, updated_before=now - SAFETY),
        limit=PAGE, order_by="update_timestamp", ascending=True)
    held_records = instance.get_run_records(RunsFilter(run_ids=state.held)) if state.held else []
    records = {r.dagster_run.run_id: r for r in [*held_records, *page]}
    done = _already_emitted(engine, list(records))
    held: list[str] = []
    found: list[tuple[str, dict[str, Any], str]] = []
    for run_id, record in records.items():
        if run_id in done:
            continue
        if record.dagster_run.tags.get(KIND_TAG) == "integrity":
            event = integrity_event(instance, record, recipient_of)
        elif _waits_for_sweep(record, now):
            held.append(run_id)
            continue
        else:
            event = transfer_event(instance, record, recipient_of)
        if event is not None:
            found.append(event)
    emitted = []
    with engine.begin() as conn:
        for event_type, data, key in found:
            if outbox.emit(conn, event_type, data, dedup_key=key):
                emitted.append(key)
    after = _aware(page[-1].update_timestamp) if page else state.after
    return Recorded(cursor=Cursor(after=after, held=held).text(), emitted=emitted, held=len(held))


def _keys(run_id: str) -> list[str]:
    return [f"{t}:{run_id}" for t in (*TRANSFER_EVENTS.values(), INTEGRITY_CHECK_FAILED)]


def _already_emitted(engine: sa.Engine, run_ids: list[str]) -> set[str]:
    if not run_ids:
        return set()
    keys = [key for run_id in run_ids for key in _keys(run_id)]
    with engine.connect() as conn:
        found = conn.execute(sa.select(events.c.dedup_key).where(events.c.dedup_key.in_(keys))).scalars()
        return {key.rpartition(":")[2] for key in found}


def _waits_for_sweep(record: RunRecord, now: datetime) -> bool:
    run = record.dagster_run
    if run.status != DagsterRunStatus.FAILURE or SWEPT_TAG in run.tags or ORPHANED_TAG in run.tags:
        return False
    ended = record.end_time or record.update_timestamp.timestamp()
    return now.timestamp() - ended < SETTLE.total_seconds()


# -- a transfer -------------------------------------------------------------------------------------

def _check_evaluations(instance: DagsterInstance, run_id: str) -> list:
    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records
    return [r.event_log_entry.dagster_event.asset_check_evaluation_data for r in records]


def _text(metadata: dict, name: str) -> str | None:
    value = metadata.get(name)
    return None if value is None else str(value.value) or None


def transfer_event(instance: DagsterInstance, record: RunRecord, recipient_of) -> tuple[str, dict, str] | None:
    transfer = describe(instance, record)
    status = transfer["status"]
    if status not in TRANSFER_EVENTS:
        return None  # CANCELLED, KILLED: a user's own doing
    outcomes = {e.asset_key.path[-1]: e for e in _check_evaluations(instance, record.dagster_run.run_id)
                if e.check_name == LAST_TRANSFER_CHECK}
    recipient = next((e.asset_key.path[0] for e in outcomes.values() if len(e.asset_key.path) == 3), None)
    models: dict[str, Any] = {}
    for name in sorted(set(transfer["models"]) | set(outcomes)):
        metrics = dict(transfer["models"].get(name) or {"windows": 0, "rows_transferred": 0})
        evaluation = outcomes.get(name)
        error = None
        if evaluation is not None and not evaluation.passed:
            metadata = evaluation.metadata
            error = {"error_code": _text(metadata, "error_type") or _text(metadata, "status"),
                     "title": first_line(_text(metadata, "error")) or evaluation.description,
                     "blame": _text(metadata, "blame") or "platform"}
        metrics["status"] = _text(evaluation.metadata, "status") if evaluation is not None else "SUCCESS"
        metrics["error"] = error
        models[name] = metrics
    failed = [m["error"] for m in models.values() if m["error"]]
    if status in _WHY:
        error = {"error_code": status, "title": _WHY[status], "blame": "platform"}
    elif failed:
        error = failed[0]
    elif status != "SUCCESS":
        message = transfer["errors"][0]["error"] if transfer["errors"] else "the run failed"
        error = {"error_code": "ERROR", "title": first_line(message), "blame": "platform"}
    else:
        error = None
    destination = transfer["destination"]
    data = {"transfer": {
        "id": transfer["id"], "status": status, "destination": destination,
        "recipient": recipient or (recipient_of(destination) if destination else None),
        "full_refresh": transfer["full_refresh"], "tags": transfer["tags"],
        "start_transfer_window_at": transfer["start_transfer_window_at"],
        "end_transfer_window_at": transfer["end_transfer_window_at"],
        "submitted_at": transfer["submitted_at"], "started_at": transfer["started_at"],
        "ended_at": transfer["ended_at"], "rows_transferred": transfer["rows_transferred"],
        "volume_transferred_in_mb": transfer["volume_transferred_in_mb"],
        "models": models, "error": error}}
    event_type = TRANSFER_EVENTS[status]
    return event_type, data, f"{event_type}:{transfer['id']}"


# -- an integrity check -----------------------------------------------------------------------------

def integrity_event(instance: DagsterInstance, record: RunRecord, recipient_of) -> tuple[str, dict, str] | None:
    run = record.dagster_run
    failed = [e for e in _check_evaluations(instance, run.run_id)
              if not e.passed and e.check_name != LAST_TRANSFER_CHECK]
    if not failed:
        return None
    path = failed[0].asset_key.path
    destination = run.tags.get(DESTINATION_TAG) or (path[1] if len(path) == 3 else None)
    recipient = path[0] if len(path) == 3 else recipient_of(destination)
    data = {"integrity_check": {
        "run_id": run.run_id, "destination": destination, "recipient": recipient,
        "ended_at": datetime.fromtimestamp(record.end_time, UTC).isoformat() if record.end_time else None,
        "failed": [{"model": e.asset_key.path[-1], "check": e.check_name, "description": e.description,
                    "counts": {k: v.value for k, v in e.metadata.items() if isinstance(v.value, int)}}
                   for e in failed]}}
    return INTEGRITY_CHECK_FAILED, data, f"{INTEGRITY_CHECK_FAILED}:{run.run_id}"
