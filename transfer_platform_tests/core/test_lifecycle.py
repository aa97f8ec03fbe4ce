"""Prequel's transfer statuses read off a Dagster run status and its tags (pure table of cases)."""

from __future__ import annotations

import pytest
from dagster import DagsterRunStatus

from transfer_platform.core.lifecycle import (
    EXPIRED_TAG,
    HEARTBEAT_TAG,
    MODELS_FAILED_TAG,
    MODELS_SUCCEEDED_TAG,
    ORPHANED_TAG,
    STATUSES,
    ended_status,
    failure_headline,
    first_line,
    transfer_status,
)

EXPIRED = {EXPIRED_TAG: "true"}
ORPHANED = {ORPHANED_TAG: "true"}


def models(succeeded: int, failed: int) -> dict[str, str]:
    return {MODELS_SUCCEEDED_TAG: str(succeeded), MODELS_FAILED_TAG: str(failed)}


# (id, Dagster run status, tags, started, steps_succeeded, transfer status)
CASES = [
    # enqueued, not dispatched yet
    ("queued", "QUEUED", {}, False, 0, "PENDING"),
    ("not-started", "NOT_STARTED", {}, False, 0, "PENDING"),
    ("managed", "MANAGED", {}, False, 0, "PENDING"),
    ("queued-tagged-expired-not-cancelled-yet", "QUEUED", EXPIRED, False, 0, "PENDING"),
    # dispatched to a worker
    ("starting", "STARTING", {}, True, 0, "RUNNING"),
    ("started", "STARTED", {HEARTBEAT_TAG: "2025-01-01T00:00:00+00:00"}, True, 0, "RUNNING"),
    ("canceling", "CANCELING", {}, True, 0, "RUNNING"),
    # in progress without a worker, on purpose (Dagster 1.13 defines it; nothing writes it yet)
    ("suspended", "SUSPENDED", {}, True, 0, "RUNNING"),
    # finished
    ("success", "SUCCESS", models(2, 0), True, 0, "SUCCESS"),
    ("success-asset-run", "SUCCESS", {}, True, 3, "SUCCESS"),
    # cancelled before it ran vs stopped while running
    ("cancelled-never-started", "CANCELED", {}, False, 0, "CANCELLED"),
    ("killed-while-running", "CANCELED", {}, True, 0, "KILLED"),
    ("killed-after-a-model-succeeded", "CANCELED", models(1, 0), True, 1, "KILLED"),
    ("expired", "CANCELED", EXPIRED, False, 0, "EXPIRED"),
    ("expired-tag-false", "CANCELED", {EXPIRED_TAG: "false"}, False, 0, "CANCELLED"),
    # failures
    ("orphaned", "FAILURE", ORPHANED, True, 0, "ORPHANED"),
    ("orphaned-even-if-models-succeeded", "FAILURE", {**ORPHANED, **models(1, 0)}, True, 1, "ORPHANED"),
    ("orphaned-tag-false", "FAILURE", {ORPHANED_TAG: "false"}, True, 0, "ERROR"),
    ("partial-via-tags", "FAILURE", models(1, 1), True, 0, "PARTIAL_FAILURE"),
    ("partial-via-tags-many", "FAILURE", models(3, 2), True, 0, "PARTIAL_FAILURE"),
    ("all-failed-via-tags", "FAILURE", models(0, 2), True, 0, "ERROR"),
    ("tags-win-over-steps", "FAILURE", models(0, 2), True, 4, "ERROR"),
    ("partial-via-steps", "FAILURE", {}, True, 1, "PARTIAL_FAILURE"),
    ("error-via-steps", "FAILURE", {}, True, 0, "ERROR"),
    ("empty-succeeded-tag", "FAILURE", {MODELS_SUCCEEDED_TAG: ""}, True, 2, "ERROR"),
    ("failed-before-dispatch", "FAILURE", {}, False, 0, "ERROR"),
]


@pytest.mark.parametrize(("run_status", "tags", "started", "steps", "expected"),
                         [pytest.param(*c[1:], id=c[0])
                          for c in CASES])
def test_transfer_status(run_status: str, tags: dict[str, str], started: bool, steps: int,
                         expected: str) -> None:
    assert transfer_status(run_status, tags, started=started, steps_succeeded=steps) == expected


def test_every_status_is_reachable_and_listed() -> None:
    assert {c[-1] for c in CASES} == set(STATUSES)
    assert len(STATUSES) == 9


def test_the_table_covers_every_dagster_run_status() -> None:
    """A run status Dagster adds must get a row (and a deliberate status), not fall into ERROR."""
    assert {s.value for s in DagsterRunStatus} == {c[1] for c in CASES}


def test_steps_default_to_none_succeeded() -> None:
    assert transfer_status("FAILURE", {}, started=True) == "ERROR"


@pytest.mark.parametrize(("succeeded", "failed", "status"), [
    pytest.param(3, 0, "SUCCESS", id="all"),
    pytest.param(0, 0, "SUCCESS", id="no-model"),
    pytest.param(2, 1, "PARTIAL_FAILURE", id="some"),
    pytest.param(0, 2, "ERROR", id="none"),
])
def test_ended_status(succeeded: int, failed: int, status: str) -> None:
    assert ended_status(succeeded, failed) == status


@pytest.mark.parametrize(("text", "line"), [
    pytest.param("cannot reach host\n  more detail", "cannot reach host", id="first-line"),
    pytest.param("\n\n  - late start\n", "late start", id="leading-blank"),
    pytest.param("invalid configuration in x.yaml (1 problem(s)):\n  - models[0]: bad\n    fix: do y",
                 "invalid configuration in x.yaml (1 problem(s)): models[0]: bad", id="config-error-header"),
    pytest.param(None, "", id="none"),
])
def test_first_line(text: str | None, line: str) -> None:
    assert first_line(text) == line


def test_the_failure_headline_is_one_line_with_the_first_error_and_its_blame() -> None:
    headline = failure_headline([("orders", "recipient", "role 'r' may not insert\nFix: GRANT ..."),
                                 ("items", None, "boom")], total=3)
    assert "\n" not in headline
    assert headline == ("PARTIAL_FAILURE: 2 of 3 model(s) failed. orders: role 'r' may not insert "
                        "[blame: recipient] (and 1 more model(s), below)")
    assert failure_headline([("items", "provider", "duplicate key")], total=1) == (
        "ERROR: 1 of 1 model(s) failed. items: duplicate key [blame: provider]")
