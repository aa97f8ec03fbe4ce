"""What a delivery's body holds (pure): the event as JSON (``generic``), or one line of text a
Slack incoming webhook shows (``slack``, ``{"text": ...}``)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from transfer_platform.webhooks.event_types import (
    INTEGRITY_CHECK_FAILED,
    MAGIC_LINK_USED,
    TRANSFER_EVENTS,
)

_ICONS = {"SUCCESS": ":white_check_mark:", "PARTIAL_FAILURE": ":warning:", "ERROR": ":x:",
          "EXPIRED": ":hourglass:", "ORPHANED": ":skull:"}


def body(event_id: str, event_type: str, occurred_at: datetime, data: dict[str, Any], fmt: str) -> bytes:
    """The bytes POSTed (and signed)."""
    if fmt == "slack":
        document: dict[str, Any] = {"text": slack_text(event_type, data)}
    else:
        document = {"id": event_id, "type": event_type, "occurred_at": occurred_at.isoformat(), "data": data}
    return json.dumps(document, separators=(",", ":"), sort_keys=True, default=str).encode()


def slack_text(event_type: str, data: dict[str, Any]) -> str:
    if event_type in TRANSFER_EVENTS.values():
        return _transfer_text(data.get("transfer") or {})
    if event_type == INTEGRITY_CHECK_FAILED:
        return _integrity_text(data.get("integrity_check") or {})
    if event_type == MAGIC_LINK_USED:
        link = data.get("magic_link") or {}
        return (f":link: A magic link of recipient `{link.get('recipient')}` was used"
                + (f": destination `{link['destination']}` saved" if link.get("destination") else ""))
    kind, _, change = event_type.partition(".")
    entry = data.get(kind) or {}
    by = f" by {data['actor']}" if data.get("actor") else ""
    return f":information_source: {kind.capitalize()} `{entry.get('name')}` {change}{by}"


def _transfer_text(transfer: dict[str, Any]) -> str:
    status = transfer.get("status", "?")
    where = f"destination `{transfer.get('destination')}`"
    if transfer.get("recipient"):
        where += f" (recipient `{transfer['recipient']}`)"
    text = f"{_ICONS.get(status, '')} Transfer {status} to {where}".strip()
    models = transfer.get("models") or {}
    if status == "SUCCESS":
        text += f": {transfer.get('rows_transferred', 0)} row(s) in {len(models)} model(s)"
    else:
        failed = [(name, m["error"]) for name, m in models.items() if m.get("error")]
        error = transfer.get("error") or {}
        if failed:
            name, first = failed[0]
            text += (f": {len(failed)} of {len(models)} model(s) failed. {name}: {first.get('title')} "
                     f"[blame: {first.get('blame')}]")
        elif error:
            text += f": {error.get('title')} [blame: {error.get('blame')}]"
    return f"{text}. Transfer {transfer.get('id')}"


def _integrity_text(check: dict[str, Any]) -> str:
    failed = check.get("failed") or []
    where = f"destination `{check.get('destination')}`"
    if check.get("recipient"):
        where += f" (recipient `{check['recipient']}`)"
    text = f":warning: Integrity check failed for {where}: {len(failed)} model(s)"
    if failed:
        text += f". {failed[0].get('model')}: {failed[0].get('description')}"
    return text
