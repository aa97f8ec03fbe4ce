"""``POST /destinations/{id}/transfer``, ``POST /transfers/{id}/cancel`` and
``POST /destinations/{id}/integrity-checks`` through the instance's queue: the first launch starts
the Dagster code server of ``workspace.yaml`` (a few seconds), which the API keeps for the next
(test_transfers_api_code_location.py). Nothing dequeues, so the runs stay queued until cancelled."""

from __future__ import annotations

import uuid

import dagster as dg
import pytest
import sqlalchemy as sa

from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    KIND_TAG,
    USER_TAG_PREFIX,
    transfer_op_config,
)
from transfer_platform.store.tables import audit_log
from transfer_platform_tests.support.api import Api

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]


def test_a_requested_transfer_is_queued_with_its_tags_and_cancelled_with_an_audit_entry(
        platform_api: Api) -> None:
    answer = platform_api.post("/destinations/globex_delta/transfer", {
        "full_refresh": False, "models": ["items"], "start_transfer_window_at": "2025-01-01T00:00:00Z",
        "end_transfer_window_at": "2025-01-02T00:00:00Z", "tags": {"team": "data", "ticket": "T-1"},
        "is_debug_mode": True})
    assert answer.status_code == 201, answer.text
    transfer_id = answer.json()["data"]["transfer_id"]
    assert str(uuid.UUID(transfer_id)) == transfer_id
    with dg.DagsterInstance.get() as instance:
        run = instance.get_run_by_id(transfer_id)
    assert run.status == dg.DagsterRunStatus.QUEUED
    assert run.tags[KIND_TAG] == "transfer"
    assert run.tags[DESTINATION_TAG] == "globex_delta"  # the tenant org-glob'ex, as data
    assert run.tags[USER_TAG_PREFIX + "team"] == "data"
    assert run.tags[USER_TAG_PREFIX + "ticket"] == "T-1"
    assert transfer_op_config(run.run_config) == {
        "destination": "globex_delta", "models": ["items"], "full_refresh": False, "dry_run": True,
        "start": "2025-01-01T00:00:00+00:00", "end": "2025-01-02T00:00:00+00:00"}

    shown = platform_api.get(f"/transfers/{transfer_id}").json()["data"]["transfer"]
    assert (shown["status"], shown["is_debug_mode"], shown["tags"]) == ("PENDING", True, {"team": "data", "ticket": "T-1"})
    listed = platform_api.get("/destinations/globex_delta/transfers?status=PENDING&include_tags=ticket.T-1")
    assert [t["id"] for t in listed.json()["data"]["transfers"]] == [transfer_id]

    cancelled = platform_api.post(f"/transfers/{transfer_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["data"] == {"transfer_id": transfer_id, "status": "CANCELLED"}
    assert platform_api.get(f"/transfers/{transfer_id}").json()["data"]["transfer"]["status"] == "CANCELLED"
    with platform_api.app.state.store.engine.connect() as conn:
        (entry,) = conn.execute(sa.select(audit_log).where(audit_log.c.resource_type == "transfer")).mappings()
    assert (entry["action"], entry["resource_id"], entry["actor"]) == ("cancel", transfer_id, "api_key:tests")
    assert entry["changes"] == {"status": {"from": "PENDING", "to": "CANCELLED"}}


def test_integrity_checks_of_one_destination_are_queued(platform_api: Api) -> None:
    answer = platform_api.post("/destinations/acme_delta/integrity-checks")
    assert answer.status_code == 201, answer.text
    run_id = answer.json()["data"]["integrity_check_id"]
    with dg.DagsterInstance.get() as instance:
        run = instance.get_run_by_id(run_id)
    assert run.job_name == "integrity"
    assert run.status == dg.DagsterRunStatus.QUEUED
    assert run.tags[KIND_TAG] == "integrity"
    assert run.tags[DESTINATION_TAG] == "acme_delta"
    # the integrity job's one op, for this destination: nothing is moved
    assert run.run_config == {"ops": {"run_integrity": {"config": {"destination": "acme_delta"}}}}
    assert run.step_keys_to_execute == ["run_integrity"]
    assert not run.asset_selection
    results = platform_api.get("/destinations/acme_delta/integrity-checks").json()["data"]["models"]
    assert {m["model"] for m in results} == {"items", "notes"}
