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


class TransferFields(_Body):
    """Prequel's transfer request, every field optional: the one model of it. The API checks it
    against the destination and turns it into a :class:`~transfer_platform.transfers.order.TransferOrder`
    (``api/transfers.py``), as the command line turns its arguments and Dagster's run config into one."""

    full_refresh: bool = False
    models: list[str] = Field(default_factory=list)
    start_transfer_window_at: datetime | None = Field(default=None, description="inclusive")
    end_transfer_window_at: datetime | None = Field(default=None, description="exclusive")
    tags: dict[str, str] = Field(default_factory=dict)
    is_debug_mode: bool = False  # the dry run: plan, move nothing


class TransferRequest(TransferFields):
    """Prequel's transfer request, every field optional (also accepted wrapped as ``{"transfer": {...}}``)."""

    transfer: dict[str, Any] | None = Field(default=None, description="the same fields, wrapped")


# -- answers ------------------------------------------------------------------------------------

class Answer(BaseModel):
    """Every successful answer."""

    status: Literal["success"]
    data: dict[str, Any]
    message: str


class TransferError(BaseModel):
    error_code: str
    title: str
    blame: str | None


class ModelMetric(BaseModel):
    """Prequel's per-model entry of a transfer; a count is null when nothing was measured."""

    model_name: str
    model_id: str | None
    status: Literal["SUCCESS", "ERROR"] | None
    rows_transferred: int | None
    delta_rows_transferred: int | None
    volume_transferred_in_mb: float | None
    most_recent_last_updated_at: str | None
    error: TransferError | None


class Transfer(BaseModel):
    """A transfer as the API shows it (ours and Prequel's names; docs/api.md lists the rest)."""

    model_config = ConfigDict(extra="allow")

    id: str
    destination: str | None
    destination_id: str | None
    status: Literal["PENDING", "RUNNING", "SUCCESS", "PARTIAL_FAILURE", "ERROR", "CANCELLED", "KILLED",
                    "EXPIRED", "ORPHANED"]
    full_refresh: bool
    is_full_refresh: bool
    is_debug_mode: bool
    submitted_at: str
    started_at: str | None
    ended_at: str | None
    rows_transferred: int
    model_metrics: list[ModelMetric]


class _TransferData(BaseModel):
    transfer: Transfer


class _TransfersData(BaseModel):
    transfers: list[Transfer]
    has_next: bool
    next_url: str | None


class _RequestedData(BaseModel):
    transfer_id: str
    transfer: Transfer


class TransferAnswer(Answer):
    data: _TransferData  # type: ignore[assignment]


class TransfersAnswer(Answer):
    data: _TransfersData  # type: ignore[assignment]


class RequestedAnswer(Answer):
    data: _RequestedData  # type: ignore[assignment]


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
    403: "the credential's scope does not allow the call (the message names the scope needed)",
    404: "no such id or name",
    409: "a conflict: a name taken, an entry of the configuration file, one still in use",
    422: "a bad body or parameter: each problem with its path and fix",
    429: "too many wrong credentials from this client: wait Retry-After seconds",
    500: "a fault of the platform (the API's log has the traceback)",
    503: "the store, the Dagster instance or a database cannot be reached",
}


def answers(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route: its error codes (400 and 422 always), each an :class:`ErrorAnswer`."""
    return {code: {"model": ErrorAnswer, "description": _WHY[code]} for code in sorted({400, 422, *codes})}
