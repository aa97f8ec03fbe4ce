"""The transfer lifecycle: Prequel's statuses of a transfer, read off a Dagster run (pure).

See :mod:`transfer_platform.orchestration.lifecycle` for the heartbeat and the sweep that produce
the EXPIRED and ORPHANED tags.
"""

from __future__ import annotations

from datetime import timedelta

HEARTBEAT_TAG = "transfer_platform/heartbeat"
EXPIRED_TAG = "transfer_platform/expired"
ORPHANED_TAG = "transfer_platform/orphaned"
MODELS_SUCCEEDED_TAG = "transfer_platform/models_succeeded"
MODELS_FAILED_TAG = "transfer_platform/models_failed"

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
