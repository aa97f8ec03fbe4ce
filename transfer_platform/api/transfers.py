"""Transfers and integrity checks: request a transfer of a destination, list transfers with
Prequel's filters and pagination, read one, cancel one; trigger a destination's integrity checks
and read their latest results.

Thin over :mod:`transfer_platform.orchestration.runs.transfers` and the Dagster instance of
``$DAGSTER_HOME`` (opened once per application, on first use, with pooled connections). A transfer
request goes through the instance's run queue as ``transfer --enqueue`` does, from the code
location the application keeps loaded (:mod:`transfer_platform.orchestration.runs.workspaces`: loaded
on the first request, again when the workspace or configuration file changes, stopped with the
application); ``is_debug_mode`` is the transfer job's dry run (it plans and moves nothing).
"""

from __future__ import annotations

import os
import threading
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from dagster import DagsterInstance
from fastapi import APIRouter, Body, Query, Request
from pydantic import ValidationError

from transfer_platform.api.edge import ActorDep, ApiError, StoreDep, ok
from transfer_platform.api.schemas import (
    Answer,
    RequestedAnswer,
    TransferAnswer,
    TransferFields,
    TransferRequest,
    TransfersAnswer,
    answers,
)
from transfer_platform.core.lifecycle import STATUSES
from transfer_platform.errors import ConfigError, Problem
from transfer_platform.orchestration.instance.sqlite_storage import record_problem
from transfer_platform.orchestration.runs import transfers as orchestration
from transfer_platform.orchestration.runs.workspaces import OpenWorkspaces
from transfer_platform.orchestration.scheduling.run_tags import parse_user_tags
from transfer_platform.store import audit
from transfer_platform.store.resources import NotFound
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.preflight import window_problems

router = APIRouter()

MAX_PAGE_SIZE = 100
_lock = threading.Lock()


def instance(request: Request) -> DagsterInstance:
    """The application's Dagster instance ($DAGSTER_HOME), opened on first use and kept."""
    app = request.app
    found = getattr(app.state, "dagster_instance", None)
    if found is not None:
        return found
    with _lock:
        if getattr(app.state, "dagster_instance", None) is None:
            if not os.environ.get("DAGSTER_HOME"):
                raise ApiError(503, "DAGSTER_HOME is not set where the API runs: transfers live in the "
                                    "Dagster instance (export DAGSTER_HOME=... as for the daemon)")
            try:
                opened = DagsterInstance.get()
            except Exception as exc:  # a broken migration record of its storage is named as such
                problem = record_problem(os.environ["DAGSTER_HOME"], exc)
                if problem is None:
                    raise
                raise problem from exc
            app.state.dagster_instance = orchestration.open_for_listing(opened)
    return app.state.dagster_instance


def workspaces(request: Request) -> OpenWorkspaces:
    """The code locations the application creates runs from, kept between requests."""
    app = request.app
    found = getattr(app.state, "workspaces", None)
    if found is not None:
        return found
    dagster = instance(request)
    with _lock:
        if getattr(app.state, "workspaces", None) is None:
            app.state.workspaces = OpenWorkspaces(dagster)
    return app.state.workspaces


def close(app: Any) -> None:  # a FastAPI application
    """Stop the code servers the application started, then close its Dagster instance."""
    kept = getattr(app.state, "workspaces", None)
    if kept is not None:
        kept.close()
    dagster = getattr(app.state, "dagster_instance", None)
    if dagster is not None:
        dagster.dispose()


# -- requesting a transfer ----------------------------------------------------------------------

def _utc(moment: datetime | None) -> datetime | None:
    if moment is None:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _request(body: Any) -> TransferFields:
    if body is None:
        body = {}
    if isinstance(body, dict) and isinstance(body.get("transfer"), dict):
        body = body["transfer"]  # also accepted wrapped, as the other resources' bodies
    try:
        wanted = TransferFields.model_validate(body)
    except ValidationError as exc:
        problems = [Problem(".".join(str(p) for p in e["loc"]) or "body", e["msg"], _FIXES.get(
            str(e["loc"][0]) if e["loc"] else "", "see the transfer request's fields")) for e in exc.errors()]
        raise ApiError(422, "invalid transfer request: " + "; ".join(f"{p.path}: {p.message}" for p in problems),
                       problems) from None
    problems = []
    for key, value in wanted.tags.items():
        try:
            parse_user_tags([f"{key}={value}"])
        except ValueError as exc:
            problems.append(Problem(f"tags.{key}", str(exc), "use letters, digits, '_' or '-' in tag keys and values"))
    if problems:
        raise ApiError(422, "invalid transfer request: " + "; ".join(p.message for p in problems), problems)
    return wanted


_FIXES = {
    "full_refresh": "true or false", "is_debug_mode": "true or false",
    "models": "a list of model names the destination receives",
    "start_transfer_window_at": "an ISO-8601 time, e.g. 2025-01-31T00:00:00Z",
    "end_transfer_window_at": "an ISO-8601 time, e.g. 2025-02-01T00:00:00Z",
    "tags": "an object of key: value, both ^[A-Za-z0-9_-]+$",
}


@router.post("/destinations/{key}/transfer", name="request a transfer", status_code=201, response_model=RequestedAnswer,
             responses=answers(401, 404, 503))
def request_transfer(key: str, request: Request, resources: StoreDep, actor: ActorDep,
                     body: Annotated[TransferRequest | None, Body()] = None):
    fields = None if body is None else body.model_dump(mode="json", exclude_unset=True)
    if fields and "transfer" in fields:
        if len(fields) > 1:
            raise ApiError(422, "the transfer request is given twice (wrapped in transfer and beside it)", [Problem(
                "transfer", "given beside the request's fields", "send the fields, or {\"transfer\": {...}}, not both")])
        fields = fields["transfer"]
    wanted = _request(fields)
    destination = resources.get("destination", key)
    config = resources.config()
    config.destination(destination.name)  # in the effective configuration (a ConfigError otherwise)
    start, end = _utc(wanted.start_transfer_window_at), _utc(wanted.end_transfer_window_at)
    problems = [Problem(p.path.replace("--start", "start_transfer_window_at").replace("--end", "end_transfer_window_at"),
                        p.message.replace("--end", "end_transfer_window_at").replace("--start", "start_transfer_window_at"),
                        p.fix.replace("--end", "end_transfer_window_at").replace("--start", "start_transfer_window_at"))
                for p in window_problems(start, end, datetime.now(UTC))]
    receives = {m.model_name for m in config.models_for(config.destination(destination.name))}
    for index, model in enumerate(wanted.models):
        if model not in receives:
            problems.append(Problem(f"models.{index}", f"destination {destination.name!r} does not receive model "
                                    f"{model!r}", f"name models it receives: {sorted(receives)}"))
    if problems:
        raise ApiError(422, "invalid transfer request: " + "; ".join(f"{p.path}: {p.message}" for p in problems),
                       problems)
    order = TransferOrder(destination=destination.name, models=wanted.models, full_refresh=wanted.full_refresh,
                          start=start, end=end, tags=wanted.tags, dry_run=wanted.is_debug_mode, trigger="api")
    dagster = instance(request)
    transfer_id = orchestration.enqueue(dagster, config, request.app.state.config_path, order,
                                        workspaces=workspaces(request))
    transfer = orchestration.get_transfer(dagster, transfer_id)
    return ok({"transfer_id": transfer_id, "transfer": with_ids(resources, [transfer])[0]},
              f"transfer {transfer_id} of {destination.name} submitted", status_code=201)


# -- listing ------------------------------------------------------------------------------------

def _moment(name: str, text: str | None) -> datetime | None:
    if text is None or text == "":
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise ApiError(422, f"{name}: {text!r} is not an ISO-8601 time",
                       [Problem(name, f"{text!r} is not an ISO-8601 time", "e.g. 2025-01-31T00:00:00Z")]) from None
    return _utc(moment)


#: the listing's query parameters (declared on the routes, so that the OpenAPI document shows them)
_StatusQuery = Annotated[str | None, Query(description=f"one of {', '.join(STATUSES)}")]
_TagsQuery = Annotated[str | None, Query(description="key.value pairs, comma-separated; all must match")]
_BeforeQuery = Annotated[str | None, Query(description="ended before this ISO-8601 time (exclusive)")]
_AfterQuery = Annotated[str | None, Query(description="ended at or after this ISO-8601 time (inclusive)")]
_SizeQuery = Annotated[str | None, Query(description=f"1 to {MAX_PAGE_SIZE} (the default)")]
_CursorQuery = Annotated[str | None, Query(description="next_url's cursor")]
_DestinationQuery = Annotated[str | None, Query(description="only this destination's (its id, or its name)")]
_KNOWN = {"status", "include_tags", "ended_before", "ended_after", "page_size", "cursor"}


def _filters(request: Request, destination: str | None,
             known: set[str] = _KNOWN) -> tuple[orchestration.TransferFilter, str | None]:
    query = request.query_params
    unknown = sorted(set(query) - known)
    if unknown:
        raise ApiError(422, f"unknown query parameter(s) {unknown}",
                       [Problem(u, "unknown parameter", f"use one of {sorted(known)}") for u in unknown])
    status = query.get("status") or None
    if status is not None and status not in STATUSES:
        raise ApiError(422, f"status: unknown status {status!r}",
                       [Problem("status", f"unknown status {status!r}", f"one of {list(STATUSES)}")])
    tags: dict[str, str] = {}
    for item in filter(None, (query.get("include_tags") or "").split(",")):
        key, dot, value = item.strip().partition(".")
        try:
            if not dot:
                raise ValueError(f"{item!r} is not key.value")
            tags.update(parse_user_tags([f"{key}={value}"]))
        except ValueError as exc:
            raise ApiError(422, f"include_tags: {exc}", [Problem(
                "include_tags", str(exc), "key.value pairs separated by commas, both sides ^[A-Za-z0-9_-]+$")]) from None
    size_text = query.get("page_size", str(MAX_PAGE_SIZE))
    if not size_text.isdigit() or not 1 <= int(size_text) <= MAX_PAGE_SIZE:
        raise ApiError(422, f"page_size: {size_text!r} is not a whole number from 1 to {MAX_PAGE_SIZE}",
                       [Problem("page_size", f"{size_text!r} is out of range", f"1 to {MAX_PAGE_SIZE}")])
    cursor = query.get("cursor") or None
    if cursor is not None:
        try:
            cursor = str(uuid.UUID(cursor))
        except ValueError:
            raise ApiError(422, "cursor: not a cursor this API gave", [Problem(
                "cursor", f"{cursor!r} is not a cursor this API gave", "follow next_url, or leave cursor out")]) from None
    wanted = orchestration.TransferFilter(
        destination=destination, status=status, tags=tags, ended_before=_moment("ended_before", query.get("ended_before")),
        ended_after=_moment("ended_after", query.get("ended_after")), limit=int(size_text))
    return wanted, cursor


def _page(request: Request, resources: StoreDep, destination: str | None,
          known: set[str] = _KNOWN) -> dict[str, Any]:
    wanted, cursor = _filters(request, destination, known)
    dagster = instance(request)
    if cursor is not None and dagster.get_run_record_by_id(cursor) is None:
        raise ApiError(422, "cursor: no such transfer (deleted since?)", [Problem(
            "cursor", f"no transfer {cursor!r}", "start again without cursor")])
    page = orchestration.page_transfers(dagster, wanted, cursor)
    next_url = None
    if page.next_cursor is not None:
        query = [(k, v) for k, v in request.query_params.multi_items() if k != "cursor"]
        next_url = f"{request.url.path}?{urlencode([*query, ('cursor', page.next_cursor)])}"
    return {"transfers": with_ids(resources, page.transfers), "has_next": page.next_cursor is not None,
            "next_url": next_url}


def with_ids(resources: StoreDep, transfers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Transfers with Prequel's ids beside our names: ``destination_id``, and each model
    metric's ``model_id`` (None for an entry since deleted)."""
    if not transfers:
        return transfers
    ids = resources.ids("destination", "model")
    return [{**t, "destination_id": ids.get(("destination", t["destination"])),
             "model_metrics": [{**m, "model_id": ids.get(("model", m["model_name"]))} for m in t["model_metrics"]]}
            for t in transfers]


@router.get("/transfers", name="list transfers", response_model=TransfersAnswer, responses=answers(401, 503))
def list_transfers(request: Request, resources: StoreDep, status: _StatusQuery = None, include_tags: _TagsQuery = None,
                   ended_before: _BeforeQuery = None, ended_after: _AfterQuery = None, page_size: _SizeQuery = None,
                   cursor: _CursorQuery = None, destination_id: _DestinationQuery = None):
    destination = None
    if destination_id is not None:
        try:
            destination = resources.get("destination", destination_id).name
        except NotFound:
            raise ApiError(422, f"destination_id: no destination {destination_id!r}", [Problem(
                "destination_id", f"no destination with id {destination_id!r}",
                "use an id from GET /destinations")]) from None
    return ok(_page(request, resources, destination, _KNOWN | {"destination_id"}))


@router.get("/destinations/{key}/transfers", name="list a destination's transfers", response_model=TransfersAnswer,
            responses=answers(401, 404, 503))
def list_destination_transfers(key: str, request: Request, resources: StoreDep, status: _StatusQuery = None,
                               include_tags: _TagsQuery = None, ended_before: _BeforeQuery = None,
                               ended_after: _AfterQuery = None, page_size: _SizeQuery = None,
                               cursor: _CursorQuery = None):
    return ok(_page(request, resources, resources.get("destination", key).name))


@router.get("/transfers/{transfer_id}", name="get a transfer", response_model=TransferAnswer, responses=answers(401, 404, 503))
def get_transfer(transfer_id: str, request: Request, resources: StoreDep):
    found = _known(request, transfer_id)
    return ok({"transfer": with_ids(resources, [found])[0]})


def _known(request: Request, transfer_id: str) -> dict[str, Any]:
    try:
        run_id = str(uuid.UUID(transfer_id))
    except ValueError:
        raise ApiError(404, f"no transfer with id {transfer_id!r}") from None
    found = orchestration.get_transfer(instance(request), run_id)
    if found is None:
        raise ApiError(404, f"no transfer with id {transfer_id!r}")
    return found


@router.post("/transfers/{transfer_id}/cancel", name="cancel a transfer", response_model=Answer,
             responses=answers(401, 404, 503))
def cancel_transfer(transfer_id: str, request: Request, resources: StoreDep, actor: ActorDep):
    before = _known(request, transfer_id)
    dagster = instance(request)
    status = orchestration.cancel(dagster, before["id"])
    # a running transfer is stopping: its status is RUNNING until it stops, its run's is CANCELING
    changed_to = status if status != before["status"] else dagster.get_run_by_id(before["id"]).status.value
    with resources.engine.begin() as conn:
        audit.record(conn, actor=actor.name, action="cancel", resource_type="transfer", resource_id=before["id"],
                     resource_name=before["destination"], changes={"status": {"from": before["status"], "to": changed_to}})
    return ok({"transfer_id": before["id"], "status": status}, f"transfer {before['id']}: {status}")


# -- integrity checks ---------------------------------------------------------------------------

@router.post("/destinations/{key}/integrity-checks", name="run a destination's integrity checks", status_code=201,
             response_model=Answer, responses=answers(401, 404, 503))
def request_integrity_check(key: str, request: Request, resources: StoreDep):
    destination = resources.get("destination", key)
    config = resources.config()
    dagster = instance(request)
    try:
        run_id = orchestration.enqueue_integrity(dagster, config, request.app.state.config_path, destination.name,
                                                 trigger="api", workspaces=workspaces(request))
    except ConfigError as exc:
        raise ApiError(422, str(exc.problems[0].message) if exc.problems else str(exc), exc.problems) from None
    return ok({"integrity_check_id": run_id, "destination": destination.name, "status": "PENDING"},
              f"integrity checks of {destination.name} submitted", status_code=201)


@router.get("/destinations/{key}/integrity-checks", name="a destination's latest integrity results",
            response_model=Answer, responses=answers(401, 404, 503))
def integrity_results(key: str, request: Request, resources: StoreDep):
    destination = resources.get("destination", key)
    results = orchestration.integrity_results(instance(request), resources.config(), destination.name)
    return ok({"destination": destination.name, "models": results})
