"""What the OpenAPI document says of the API's bodies and answers.

Bodies are wrapped by resource (``{"destination": {...}}``): the wrapper is typed here, the entry
inside is checked by the configuration file's own models and cross-checks (its fields are in
docs/configuration.md; Prequel's names and shapes are accepted beside ours, docs/api.md), so the
document says "an object" for it. Every answer is the envelope ``{status, data, message}``; an
error adds ``errors`` (each problem's path, message and fix).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


_ENTRY = "the entry as the configuration file holds it (docs/configuration.md), secrets as plain values"


class RecipientBody(_Body):
    recipient: dict[str, Any] = Field(description=_ENTRY)


class DestinationBody(_Body):
    destination: dict[str, Any] = Field(
        description=_ENTRY + "; Prequel's recipient_id and vendor-nested connection are accepted")


class SourceBody(_Body):
    source: dict[str, Any] = Field(description=_ENTRY + "; Prequel's vendor-nested connection is accepted")


class ModelBody(_Body):
    model: dict[str, Any] = Field(description=_ENTRY + "; Prequel's source_id is accepted")


class WebhookBody(_Body):
    webhook: dict[str, Any] = Field(description='{"url", "events": [...], "format": "generic" | "slack", "is_enabled"}')


class MagicLinkBody(_Body):
    magic_link: dict[str, Any] = Field(description='{"recipient_id", "redirect_url", "vendors": [...]}')


BODIES: dict[str, type[_Body]] = {"recipient": RecipientBody, "destination": DestinationBody,
                                  "source": SourceBody, "model": ModelBody}


class TransferRequest(_Body):
    """Prequel's transfer request, every field optional (also accepted wrapped as ``{"transfer": {...}}``)."""

    full_refresh: bool = False
    models: list[str] = Field(default_factory=list)
    start_transfer_window_at: datetime | None = Field(default=None, description="inclusive")
    end_transfer_window_at: datetime | None = Field(default=None, description="exclusive")
    tags: dict[str, str] = Field(default_factory=dict)
    is_debug_mode: bool = False
    transfer: dict[str, Any] | None = Field(default=None, description="the same fields, wrapped")


# -- answers ------------------------------------------------------------------------------------

class Answer(BaseModel):
    """Every successful answer."""

    status: Literal["success"]
    data: dict[str, Any]
    message: str


class ProblemShown(BaseModel):
    path: str
    message: str
    fix: str


class ErrorAnswer(BaseModel):
    """Every error: one line in ``message``; each problem's path and fix in ``errors``."""

    status: Literal["error"]
    data: None
    message: str
    errors: list[ProblemShown] | None = None


_WHY = {
    400: "an X-Prequel-Api-Version later than the one served",
    401: "no API key, or a wrong or revoked one",
    404: "no such id or name",
    409: "a conflict: a name taken, an entry of the configuration file, one still in use",
    422: "a bad body or parameter: each problem with its path and fix",
    500: "a fault of the platform (the API's log has the traceback)",
    503: "the store, the Dagster instance or a database cannot be reached",
}


def answers(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route: its error codes (400 and 422 always), each an :class:`ErrorAnswer`."""
    return {code: {"model": ErrorAnswer, "description": _WHY[code]} for code in sorted({400, 422, *codes})}
