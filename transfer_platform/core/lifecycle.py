"""The transfer lifecycle: Prequel's statuses of a transfer, read off a Dagster run (pure).

See :mod:`transfer_platform.orchestration.runs.lifecycle` for the heartbeat and the sweep that produce
the EXPIRED and ORPHANED tags.
"""

from __future__ import annotations

from datetime import timedelta

# bookkeeping, hidden from the UI (orchestration.scheduling.run_tags.HIDDEN_PREFIX; this module imports nothing)
_HIDDEN = ".dagster/transfer_platform"
HEARTBEAT_TAG = f"{_HIDDEN}/heartbeat"
EXPIRED_TAG = f"{_HIDDEN}/expired"
ORPHANED_TAG = f"{_HIDDEN}/orphaned"
MODELS_SUCCEEDED_TAG = f"{_HIDDEN}/models_succeeded"
MODELS_FAILED_TAG = f"{_HIDDEN}/models_failed"

EXPIRE_AFTER = timedelta(hours=6)
ORPHANED_AFTER = timedelta(minutes=3)

STATUSES = ("PENDING", "RUNNING", "ERROR", "PARTIAL_FAILURE", "SUCCESS", "CANCELLED", "KILLED",
            "EXPIRED", "ORPHANED")


def transfer_status(run_status: str, tags: dict[str, str], *, started: bool,
                    steps_succeeded: int = 0) -> str:
    """Prequel's status of a transfer from its Dagster run status and tags.

    ``started``: the run has a start time (a cancelled run that never started is CANCELLED, one
    stopped while running is KILLED). ``steps_succeeded``: for a failed run of several asset
    steps, how many succeeded (PARTIAL_FAILURE rather than ERROR).
    """
    if run_status in ("QUEUED", "NOT_STARTED", "MANAGED"):
        return "PENDING"
    if run_status in ("STARTING", "STARTED", "CANCELING", "SUSPENDED"):
        return "RUNNING"
    if run_status == "SUCCESS":
        return "SUCCESS"
    if run_status == "CANCELED":
        if tags.get(EXPIRED_TAG) == "true":
            return "EXPIRED"
        return "KILLED" if started else "CANCELLED"
    if tags.get(ORPHANED_TAG) == "true":
        return "ORPHANED"
    succeeded = int(tags.get(MODELS_SUCCEEDED_TAG, steps_succeeded) or 0)
    return "PARTIAL_FAILURE" if succeeded > 0 else "ERROR"


def ended_status(models_succeeded: int, models_failed: int) -> str:
    """The status of a transfer whose models have all run: SUCCESS, PARTIAL_FAILURE or ERROR."""
    if models_failed == 0:
        return "SUCCESS"
    return "PARTIAL_FAILURE" if models_succeeded > 0 else "ERROR"


def first_line(text: str | None) -> str:
    """The first line that says something (a ConfigError starts with a header, then its problems:
    the header and the first problem)."""
    lines = [line.strip(" -") for line in (text or "").splitlines() if line.strip(" -")]
    if not lines:
        return ""
    if lines[0].startswith("invalid configuration") and len(lines) > 1:
        return f"{lines[0].rstrip(':')}: {lines[1]}"
    return lines[0]


def failure_headline(failed: list[tuple[str, str | None, str | None]], total: int) -> str:
    """One line first, for where a failure is shown: how many models failed and the first one's
    error. ``failed``: (model, blame, error) of each failed model; ``total``: models run."""
    status = ended_status(total - len(failed), len(failed))
    model, blame, error = failed[0]
    more = f" (and {len(failed) - 1} more model(s), below)" if len(failed) > 1 else ""
    return (f"{status}: {len(failed)} of {total} model(s) failed. {model}: {first_line(error)} "
            f"[blame: {blame or 'platform'}]{more}")
