"""``GET /transfers`` (and per destination), ``GET /transfers/{id}`` and the request checks of
``POST /destinations/{id}/transfer``, over a real Dagster instance (SQLite storage in a temporary
``DAGSTER_HOME``) whose transfers are recorded through its run and event storage with chosen
times, and the API's store in PostgreSQL. No Dagster process is started here (see
``test_transfers_api_enqueue.py`` for the queue)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from urllib.parse import quote

import dagster as dg
import pytest

from transfer_platform_tests.support.api import Api
from transfer_platform_tests.support.recorded_transfers import T0, record

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

def instance_of(api: Api) -> dg.DagsterInstance:
    return dg.DagsterInstance.get()


def listed(api: Api, url: str) -> list[str]:
    answer = api.get(url)
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    assert not data["has_next"], "a single page was expected"
    return [t["id"] for t in data["transfers"]]


def test_filters_by_status_tags_destination_and_end_time_with_exact_boundaries(platform_api: Api) -> None:
    with instance_of(platform_api) as instance:
        at = lambda minutes: T0 + timedelta(minutes=minutes)  # noqa: E731
        ok = record(instance, "SUCCESS", created=at(0), ended=at(10), tags={"team": "data", "tier": "gold"})
        error = record(instance, "ERROR", created=at(1), ended=at(11), tags={"team": "data"})
        partial = record(instance, "PARTIAL_FAILURE", created=at(2), ended=at(12), tags={"team": "ops"})
        cancelled = record(instance, "CANCELLED", created=at(3), ended=at(13))
        killed = record(instance, "KILLED", created=at(4), ended=at(14))
        pending = record(instance, "PENDING", created=at(5))
        running = record(instance, "RUNNING", created=at(6))
        globex = record(instance, "SUCCESS", created=at(7), ended=at(17), destination="globex_delta")
        for kind in ("integrity", "delete_sweep"):  # runs of a destination, not transfers
            record(instance, "SUCCESS", created=at(8), ended=at(18), tags={"team": "data"}, kind=kind)
    newest_first = [globex, running, pending, killed, cancelled, partial, error, ok]

    assert listed(platform_api, "/transfers") == newest_first
    for status, expected in {"SUCCESS": [globex, ok], "ERROR": [error], "PARTIAL_FAILURE": [partial],
                             "CANCELLED": [cancelled], "KILLED": [killed], "PENDING": [pending],
                             "RUNNING": [running], "EXPIRED": [], "ORPHANED": []}.items():
        assert listed(platform_api, f"/transfers?status={status}") == expected, status
    assert listed(platform_api, "/transfers?include_tags=team.data") == [error, ok]
    assert listed(platform_api, "/transfers?include_tags=team.data,tier.gold") == [ok]  # all must match
    assert listed(platform_api, "/transfers?include_tags=team.data,tier.silver") == []
    assert listed(platform_api, "/destinations/globex_delta/transfers") == [globex]
    destination_id = platform_api.get("/destinations/acme_delta").json()["data"]["destination"]["id"]
    assert listed(platform_api, f"/destinations/{destination_id}/transfers?status=SUCCESS") == [ok]

    def moment(minutes: int) -> str:
        return quote(at(minutes).isoformat())

    # ended_after is inclusive, ended_before exclusive: both exactly at the SUCCESS transfer's end
    assert listed(platform_api, f"/transfers?ended_after={moment(10)}") == [globex, killed, cancelled, partial, error, ok]
    assert listed(platform_api, f"/transfers?ended_before={moment(10)}") == []
    assert listed(platform_api, f"/transfers?ended_before={moment(11)}") == [ok]
    assert listed(platform_api, f"/transfers?ended_after={moment(11)}&ended_before={moment(13)}") == [partial, error]
    assert listed(platform_api, f"/transfers?ended_after={moment(10)}&status=PENDING") == []  # never ended
    assert listed(platform_api, "/transfers?ended_after=2025-03-01T12:10:00Z&status=SUCCESS") == [globex, ok]


def test_pages_follow_next_url_with_no_transfer_twice_or_missing(platform_api: Api) -> None:
    with instance_of(platform_api) as instance:
        ids = [record(instance, "SUCCESS" if k % 3 else "ERROR", created=T0 + timedelta(minutes=k),
                      ended=T0 + timedelta(minutes=k, seconds=30), tags={"team": "data"}) for k in range(23)]
    seen, url, pages = [], "/transfers?page_size=5&include_tags=team.data", 0
    while url:
        answer = platform_api.get(url)
        assert answer.status_code == 200, answer.text
        data = answer.json()["data"]
        assert len(data["transfers"]) == (5 if data["has_next"] else 3)
        assert data["has_next"] == (data["next_url"] is not None)
        seen += [t["id"] for t in data["transfers"]]
        url, pages = data["next_url"], pages + 1
        if url:
            assert url.startswith("/transfers?")
            assert "include_tags=team.data" in url
            assert "page_size=5" in url
    assert pages == 5
    assert seen == list(reversed(ids))  # every transfer once, newest first

    errors = [i for k, i in enumerate(ids) if k % 3 == 0]  # a status told apart after the query, paged too
    seen, url = [], "/destinations/acme_delta/transfers?status=ERROR&page_size=3"
    while url:
        data = platform_api.get(url).json()["data"]
        seen += [t["id"] for t in data["transfers"]]
        url = data["next_url"]
        if url:
            assert url.startswith("/destinations/acme_delta/transfers?")
    assert seen == list(reversed(errors))

    exact = platform_api.get("/transfers?page_size=23").json()["data"]  # a full last page: nothing after
    assert (len(exact["transfers"]), exact["has_next"], exact["next_url"]) == (23, False, None)
    assert platform_api.get("/transfers").json()["data"]["has_next"] is False  # default page size 100


def test_one_transfer_with_its_models_metrics_and_errors(platform_api: Api) -> None:
    with instance_of(platform_api) as instance:
        run_id = record(instance, "PARTIAL_FAILURE", created=T0, ended=T0 + timedelta(minutes=1), metrics=True,
                        failure={"error": "cannot reach destination 'acme_delta' at db:5432: refused\nmore",
                                 "error_type": "ConnectionFailure", "blame": "recipient"})
    answer = platform_api.get(f"/transfers/{run_id}")
    assert answer.status_code == 200, answer.text
    transfer = answer.json()["data"]["transfer"]
    assert transfer["id"] == run_id
    assert transfer["status"] == "PARTIAL_FAILURE"
    assert transfer["rows_transferred"] == 21
    items = transfer["models"]["items"]
    assert (items["windows"], items["rows_transferred"], items["rows_deleted"]) == (2, 21, 2)
    assert items["volume_transferred_in_mb"] == 1.0
    assert set(transfer["models"]) == {"items"}  # the models that moved rows
    (error,) = transfer["model_errors"]
    assert error["model"] == "notes"
    assert error["error_code"] == "ConnectionFailure"
    assert error["title"] == "cannot reach destination 'acme_delta' at db:5432: refused"
    assert error["blame"] == "recipient"
    assert transfer["submitted_at"] == T0.isoformat()
    assert transfer["ended_at"] == (T0 + timedelta(minutes=1)).isoformat()
    # the list shows the same description
    (listed_one,) = platform_api.get("/transfers").json()["data"]["transfers"]
    assert listed_one == transfer


def test_unknown_ids_are_404(platform_api: Api) -> None:
    for path in (f"/transfers/{uuid.uuid4()}", "/transfers/not-a-uuid", "/transfers/x'; DROP TABLE runs; --"):
        answer = platform_api.get(path)
        assert answer.status_code == 404, (path, answer.text)
        assert answer.json()["status"] == "error"
    assert platform_api.post(f"/transfers/{uuid.uuid4()}/cancel").status_code == 404
    for path in ("/destinations/nope/transfers", "/destinations/a'b\"c/transfers", "/destinations/nope/integrity-checks"):
        assert platform_api.get(path).status_code == 404, path
    assert platform_api.post("/destinations/o'hara/transfer", {}).status_code == 404


@pytest.mark.parametrize(("query", "parameter"), [
    ("page_size=101", "page_size"), ("page_size=0", "page_size"), ("page_size=ten", "page_size"),
    ("status=DONE", "status"), ("status=' OR '1'='1", "status"), ("include_tags=team", "include_tags"),
    ("include_tags=team.x'--", "include_tags"), ("ended_before=yesterday", "ended_before"),
    ("ended_after=2025-13-01", "ended_after"), ("cursor=abc", "cursor"), (f"cursor={uuid.uuid4()}", "cursor"),
    ("colour=red", "colour"),
])
def test_bad_filters_are_422_naming_the_parameter_and_the_fix(platform_api: Api, query: str, parameter: str) -> None:
    answer = platform_api.get(f"/transfers?{query}")
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["status"] == "error"
    (problem,) = body["errors"]
    assert problem["path"] == parameter
    assert problem["fix"]


@pytest.mark.parametrize(("body", "path"), [
    ({"models": ["items", "nope"]}, "models.1"),
    ({"tags": {"team": "da ta"}}, "tags.team"),
    ({"tags": {"o'hara": "x"}}, "tags.o'hara"),
    ({"start_transfer_window_at": "2025-01-02T00:00:00Z", "end_transfer_window_at": "2025-01-01T00:00:00Z"},
     "start_transfer_window_at"),
    ({"start_transfer_window_at": "2999-01-01T00:00:00Z"}, "start_transfer_window_at"),
    ({"start_transfer_window_at": "soon"}, "start_transfer_window_at"),
    ({"full_refresh": "maybe"}, "full_refresh"),
    ({"colour": "red"}, "colour"),
])
def test_bad_transfer_requests_are_422_and_enqueue_nothing(platform_api: Api, body: dict, path: str) -> None:
    answer = platform_api.post("/destinations/acme_delta/transfer", body)
    assert answer.status_code == 422, answer.text
    paths = [p["path"] for p in answer.json()["errors"]]
    assert path in paths
    if path == "models.1":
        assert "'nope'" in answer.json()["message"]
    with dg.DagsterInstance.get() as instance:
        assert instance.get_run_records() == []


def test_without_a_valid_api_key_every_route_is_401(platform_api: Api) -> None:
    run = str(uuid.uuid4())
    calls = [("GET", "/transfers"), ("GET", "/destinations/acme_delta/transfers"), ("GET", f"/transfers/{run}"),
             ("POST", f"/transfers/{run}/cancel"), ("POST", "/destinations/acme_delta/transfer"),
             ("POST", "/destinations/acme_delta/integrity-checks"), ("GET", "/destinations/acme_delta/integrity-checks")]
    for headers in ({}, {"X-API-KEY": "wrong"}, {"X-API-KEY": platform_api.key + "x"}):
        for method, path in calls:
            answer = platform_api.client.request(method, path, headers=headers, json={})
            assert answer.status_code == 401, (method, path, answer.text)
            assert answer.json()["data"] is None


def test_integrity_results_before_any_check(platform_api: Api) -> None:
    answer = platform_api.get("/destinations/globex_delta/integrity-checks")
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    assert data["destination"] == "globex_delta"
    assert [(m["model"], m["status"]) for m in data["models"]] == [("items", "NOT_RUN"), ("notes", "NOT_RUN")]


def test_cancelling_a_running_transfer_records_what_the_cancel_changed(platform_api: Api) -> None:
    import sqlalchemy as sa

    from transfer_platform.store.tables import audit_log

    running = record(instance_of(platform_api), "RUNNING", created=T0)
    answer = platform_api.post(f"/transfers/{running}/cancel")
    assert answer.status_code == 200, answer.text
    with platform_api.app.state.store.engine.connect() as conn:
        (entry,) = conn.execute(sa.select(audit_log).where(audit_log.c.resource_id == running)).mappings()
    change = entry["changes"]["status"]
    assert change["from"] == "RUNNING"
    assert change["to"] in ("CANCELING", "KILLED"), change  # the run stops; never RUNNING -> RUNNING
