"""Recipients, destinations, sources and models: list, get, create, update (merge patch), delete;
and testing a destination, saved or not, with the same checks as ``test-connection``."""

from typing import Any

from fastapi import APIRouter, Request

from transfer_platform.api.dagster_reload import reload_soon
from transfer_platform.api.edge import ActorDep, StoreDep, ok
from transfer_platform.api.schemas import BODIES, Answer, DestinationBody, answers
from transfer_platform.api.wording import as_entered, secrets_entered
from transfer_platform.store.prequel import ID_FIELDS, beside_ours
from transfer_platform.store.resources import Resource, ResourceStore, validate_entry
from transfer_platform.transfers.connection_test import run_connection_test

router = APIRouter()

#: path segment -> (kind, plural)
_COLLECTIONS = {"recipients": "recipient", "destinations": "destination", "sources": "source", "models": "model"}


def shown(resources: ResourceStore, kind: str, found: list[Resource]) -> list[dict[str, Any]]:
    """Entries as the API returns them: ours, with Prequel's names and shapes beside
    (:func:`beside_ours`: the ids of the entries they name, the vendor-nested connection)."""
    named = {named_kind for _, named_kind in ID_FIELDS[kind].values()}
    ids = resources.ids(*named) if named and found else {}
    return [beside_ours(kind, r.shown(), ids) for r in found]


def _add_collection(path: str, kind: str) -> None:
    body_model = BODIES[kind]

    @router.get(f"/{path}", name=f"list {path}", response_model=Answer, responses=answers(401, 503))
    def list_all(resources: StoreDep):
        return ok({path: shown(resources, kind, resources.list(kind))})

    @router.get(f"/{path}/{{key}}", name=f"get a {kind}", response_model=Answer, responses=answers(401, 404, 503))
    def get_one(key: str, resources: StoreDep):
        return ok({kind: shown(resources, kind, [resources.get(kind, key)])[0]})

    @router.post(f"/{path}", name=f"create a {kind}", status_code=201, response_model=Answer,
                 responses=answers(401, 409, 503))
    def create(request: Request, body: body_model, resources: StoreDep,
               actor: ActorDep):
        created = resources.create(kind, getattr(body, kind), actor=actor.name)
        reload_soon(request.app)
        return ok({kind: shown(resources, kind, [created])[0]}, f"{kind} {created.name} created", status_code=201)

    @router.patch(f"/{path}/{{key}}", name=f"update a {kind}", response_model=Answer,
                  responses=answers(401, 404, 409, 503))
    def update(key: str, request: Request, body: body_model, resources: StoreDep,
               actor: ActorDep):
        updated = resources.update(kind, key, getattr(body, kind), actor=actor.name)
        reload_soon(request.app)
        return ok({kind: shown(resources, kind, [updated])[0]}, f"{kind} {updated.name} updated")

    @router.delete(f"/{path}/{{key}}", name=f"delete a {kind}", response_model=Answer,
                   responses=answers(401, 404, 409, 503))
    def delete(key: str, request: Request, resources: StoreDep,
               actor: ActorDep):
        deleted = resources.delete(kind, key, actor=actor.name)
        reload_soon(request.app)
        return ok({kind: {"id": deleted.id, "name": deleted.name}}, f"{kind} {deleted.name} deleted")


for _path, _kind in _COLLECTIONS.items():
    _add_collection(_path, _kind)


def _checks(config, name: str) -> dict[str, Any]:
    """The connection checks of destination ``name``; their fixes speak of its secrets as entered
    when they were given as values, not as environment variables (:mod:`~transfer_platform.api.wording`)."""
    checks = run_connection_test(config, name)
    failed = sum(check.failed for check in checks)
    shown = [check.as_dict() for check in checks]
    if secrets_entered(config.destination(name)):
        shown = [{**check, "fix": as_entered(check["fix"])} for check in shown]
    return {"passed": not failed, "checks": shown}


@router.post("/test-destination", name="test a destination before it is saved", response_model=Answer,
             responses=answers(401, 503))
def check_new_destination(body: DestinationBody, resources: StoreDep):
    """Success when the request is well formed; the checks' results are inside (as Prequel's)."""
    document = validate_entry("destination", resources.from_prequel("destination", body.destination))
    result = _checks(resources.candidate_config("destination", document), document["name"])
    return ok(result, "every check passed" if result["passed"] else "some checks failed")


@router.post("/destinations/{key}/test-connection", name="test a saved destination", response_model=Answer,
             responses=answers(401, 404, 503))
def check_destination(key: str, resources: StoreDep):
    destination = resources.get("destination", key)
    result = _checks(resources.config(), destination.name)
    return ok(result, "every check passed" if result["passed"] else "some checks failed")
