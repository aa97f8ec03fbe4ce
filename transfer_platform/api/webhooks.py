"""Webhook subscriptions: ``POST/GET/PATCH/DELETE /webhooks``, and ``GET /webhooks/{id}/deliveries``.

The body is ``{"webhook": {"url", "events": [...], "format": "generic" | "slack", "is_enabled"}}``.
The signing secret is made by the server and returned once, in the answer to ``POST /webhooks``
(``data.webhook.secret``); it is stored encrypted and never returned again (see
:mod:`transfer_platform.webhooks` for how a receiver verifies a delivery).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from transfer_platform.api.edge import ActorDep, ApiError, StoreDep, ok
from transfer_platform.api.schemas import Answer, WebhookBody, answers
from transfer_platform.errors import Problem
from transfer_platform.webhooks import subscriptions
from transfer_platform.webhooks.event_types import EVENT_TYPES

router = APIRouter()
_STATUSES = ("pending", "delivered", "failed", "skipped")


@router.get("/webhooks", name="list webhooks", response_model=Answer, responses=answers(401, 503))
def list_webhooks(resources: StoreDep):
    return ok({"webhooks": [w.shown() for w in subscriptions.list_all(resources.engine)],
               "event_types": list(EVENT_TYPES)})


@router.post("/webhooks", name="create a webhook", status_code=201, response_model=Answer, responses=answers(401, 503))
def create_webhook(body: WebhookBody, resources: StoreDep, actor: ActorDep):
    created, secret = subscriptions.create(resources.engine, body.webhook, actor=actor.name)
    return ok({"webhook": {**created.shown(), "secret": secret}},
              "webhook created: keep its secret now, it is not shown again (each delivery's "
              "X-Transfer-Platform-Signature is signed with it)", status_code=201)


@router.get("/webhooks/{webhook_id}", name="get a webhook", response_model=Answer, responses=answers(401, 404, 503))
def get_webhook(webhook_id: str, resources: StoreDep):
    return ok({"webhook": subscriptions.get(resources.engine, webhook_id).shown()})


@router.patch("/webhooks/{webhook_id}", name="update a webhook", response_model=Answer, responses=answers(401, 404, 503))
def update_webhook(webhook_id: str, body: WebhookBody, resources: StoreDep, actor: ActorDep):
    updated = subscriptions.update(resources.engine, webhook_id, body.webhook, actor=actor.name)
    return ok({"webhook": updated.shown()}, "webhook updated")


@router.delete("/webhooks/{webhook_id}", name="delete a webhook", response_model=Answer, responses=answers(401, 404, 503))
def delete_webhook(webhook_id: str, resources: StoreDep, actor: ActorDep):
    deleted = subscriptions.delete(resources.engine, webhook_id, actor=actor.name)
    return ok({"webhook": {"id": deleted.id}}, "webhook deleted")


@router.get("/webhooks/{webhook_id}/deliveries", name="list a webhook's deliveries", response_model=Answer, responses=answers(401, 404, 503))
def list_deliveries(webhook_id: str, resources: StoreDep,
                    status: Annotated[str | None, Query()] = None,
                    limit: Annotated[int, Query(ge=1, le=100)] = 100):
    if status is not None and status not in _STATUSES:
        raise ApiError(422, f"unknown delivery status {status!r}",
                       [Problem("status", f"unknown delivery status {status!r}", f"one of: {', '.join(_STATUSES)}")])
    return ok({"deliveries": subscriptions.deliveries(resources.engine, webhook_id, status=status, limit=limit)})
