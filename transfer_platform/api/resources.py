"""Recipients, destinations, sources and models: list, get, create, update (merge patch), delete;
and testing a destination, saved or not, with the same checks as ``test-connection``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from transfer_platform.api.app import ActorDep, JsonBody, StoreDep, ok, unwrap
from transfer_platform.api.dagster_reload import reload_soon
from transfer_platform.store.resources import validate_entry

router = APIRouter()

#: path segment -> (kind, plural)
_COLLECTIONS = {"recipients": "recipient", "destinations": "destination", "sources": "source", "models": "model"}


def _add_collection(path: str, kind: str) -> None:
    @router.get(f"/{path}", name=f"list {path}")
    def list_all(resources: StoreDep):
        return ok({path: [r.shown() for r in resources.list(kind)]})

    @router.get(f"/{path}/{{key}}", name=f"get a {kind}")
    def get_one(key: str, resources: StoreDep):
        return ok({kind: resources.get(kind, key).shown()})

    @router.post(f"/{path}", name=f"create a {kind}", status_code=201)
    def create(request: Request, body: JsonBody, resources: StoreDep,
               actor: ActorDep):
        created = resources.create(kind, unwrap(body, kind), actor=actor.name)
        reload_soon(request.app)
        return ok({kind: created.shown()}, f"{kind} {created.name} created", status_code=201)

    @router.patch(f"/{path}/{{key}}", name=f"update a {kind}")
    def update(key: str, request: Request, body: JsonBody, resources: StoreDep,
               actor: ActorDep):
        updated = resources.update(kind, key, unwrap(body, kind), actor=actor.name)
        reload_soon(request.app)
        return ok({kind: updated.shown()}, f"{kind} {updated.name} updated")

    @router.delete(f"/{path}/{{key}}", name=f"delete a {kind}")
    def delete(key: str, request: Request, resources: StoreDep,
               actor: ActorDep):
        deleted = resources.delete(kind, key, actor=actor.name)
        reload_soon(request.app)
        return ok({kind: {"id": deleted.id, "name": deleted.name}}, f"{kind} {deleted.name} deleted")


for _path, _kind in _COLLECTIONS.items():
    _add_collection(_path, _kind)


def _checks(config, name: str) -> dict[str, Any]:
    from transfer_platform.transfers.connection_test import run_connection_test

    checks = run_connection_test(config, name)
    failed = sum(check.failed for check in checks)
    return {"passed": not failed, "checks": [check.as_dict() for check in checks]}


@router.post("/test-destination", name="test a destination before it is saved")
def check_new_destination(body: JsonBody, resources: StoreDep):
    """Success when the request is well formed; the checks' results are inside (as Prequel's)."""
    document = validate_entry("destination", unwrap(body, "destination"))
    result = _checks(resources.candidate_config("destination", document), document["name"])
    return ok(result, "every check passed" if result["passed"] else "some checks failed")


@router.post("/destinations/{key}/test-connection", name="test a saved destination")
def check_destination(key: str, resources: StoreDep):
    destination = resources.get("destination", key)
    result = _checks(resources.config(), destination.name)
    return ok(result, "every check passed" if result["passed"] else "some checks failed")
