"""A client written from Prequel's public API pages (API version 2023-12-01), not from this
project's code, runs its scenarios against the real application: it speaks only Prequel's names and
shapes (ids where it names another resource, the connection nested under its vendor with the
credentials under ``password_auth``, ``destination_id`` / ``is_full_refresh`` / ``model_metrics``
on a transfer, the ``destination_id`` list filter, one result per check from ``test-destination``).

The fixtures behind it are the suite's own (a store in PostgreSQL, a Dagster instance whose
transfers are recorded with chosen metrics); the client never reads them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import dagster as dg
import pytest
from fastapi.testclient import TestClient

from transfer_platform_tests.support.api import Api
from transfer_platform_tests.support.config import events_model
from transfer_platform_tests.support.mysql import MYSQL
from transfer_platform_tests.support.postgres import PG
from transfer_platform_tests.support.recorded_transfers import T0, record

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")


class PrequelClient:
    """Prequel's export API as its reference describes it: ``X-API-KEY`` and
    ``X-Prequel-Api-Version`` headers, answers ``{status, data, message}``, bodies wrapped by
    resource, cursor pages (``has_next``, ``next_url``)."""

    VERSION = "2023-12-01"

    def __init__(self, http: TestClient, api_key: str) -> None:
        self.http = http
        self.headers = {"X-API-KEY": api_key, "X-Prequel-Api-Version": self.VERSION}

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, *,
             params: dict[str, str] | None = None, expect: int = 200) -> dict[str, Any]:
        answer = self.http.request(method, path, headers=self.headers, json=body, params=params)
        assert answer.status_code == expect, f"{method} {path}: {answer.status_code} {answer.text}"
        document = answer.json()
        assert set(document) >= {"status", "data", "message"}
        assert document["status"] == ("success" if answer.status_code < 400 else "error")
        return document["data"]

    def create_recipient(self, name: str, id_in_provider_system: str) -> dict[str, Any]:
        return self.call("POST", "/recipients", {"recipient": {
            "name": name, "id_in_provider_system": id_in_provider_system}}, expect=201)["recipient"]

    @staticmethod
    def postgres(host: str, port: int, database: str, schema: str, username: str, password: str) -> dict[str, Any]:
        """A PostgreSQL destination's connection, nested under its vendor."""
        return {"vendor": "postgres", "postgres": {
            "host": host, "port": port, "database": database, "schema": schema,
            "auth_method": "password_auth", "password_auth": {"username": username, "password": password}}}

    def create_destination(self, name: str, recipient_id: str, connection: dict[str, Any],
                           **fields: Any) -> dict[str, Any]:
        return self.call("POST", "/destinations", {"destination": {
            "name": name, "recipient_id": recipient_id, **connection, **fields}}, expect=201)["destination"]

    def get_destination(self, destination_id: str) -> dict[str, Any]:
        return self.call("GET", f"/destinations/{destination_id}")["destination"]

    def update_destination(self, destination_id: str, **fields: Any) -> dict[str, Any]:
        return self.call("PATCH", f"/destinations/{destination_id}", {"destination": fields})["destination"]

    def test_destination(self, destination: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", "/test-destination", {"destination": destination})

    def test_connection(self, destination_id: str) -> dict[str, Any]:
        return self.call("POST", f"/destinations/{destination_id}/test-connection")

    def transfer(self, destination_id: str, **request: Any) -> dict[str, Any]:
        return self.call("POST", f"/destinations/{destination_id}/transfer", request, expect=201)

    def get_transfer(self, transfer_id: str) -> dict[str, Any]:
        return self.call("GET", f"/transfers/{transfer_id}")["transfer"]

    def list_transfers(self, **filters: str) -> list[dict[str, Any]]:
        """Every page, following ``next_url`` while ``has_next``."""
        found: list[dict[str, Any]] = []
        page = self.call("GET", "/transfers", params=filters)
        found.extend(page["transfers"])
        while page["has_next"]:
            page = self.call("GET", page["next_url"])
            found.extend(page["transfers"])
        return found

    def list_destinations(self) -> list[dict[str, Any]]:
        return self.call("GET", "/destinations")["destinations"]


@pytest.fixture
def prequel(api: Api) -> PrequelClient:
    return PrequelClient(api.client, api.key)


def test_onboarding_with_ids_and_the_vendor_nested_connection(prequel: PrequelClient, api: Api,
                                                               dst_schema: str) -> None:
    # the source and model are the provider's (they are Prequel's shapes already)
    api.post("/sources", {"source": {"name": "src", "vendor": "postgres", "postgres": {
        "host": PG["host"], "port": PG["port"], "database": PG["dbname"],
        "auth_method": "password_auth", "password_auth": {"username": PG["user"]}}}})
    source = api.get("/sources/src").json()["data"]["source"]
    model = events_model("public.api_events", min_start=datetime(2024, 1, 1, tzinfo=UTC))
    del model["source_name"]
    assert api.post("/models", {"model": {**model, "source_id": source["id"]}}).status_code == 201

    recipient = prequel.create_recipient("acme", "acme-org")
    connection = prequel.postgres(PG["host"], PG["port"], PG["dbname"], dst_schema, PG["user"], "s3cret-Value")
    created = prequel.create_destination("acme_pg", recipient["id"], connection, frequency_minutes=60)
    assert created["recipient_id"] == recipient["id"]
    assert created["vendor"] == "postgres"
    assert created["postgres"] == {"host": PG["host"], "port": PG["port"], "database": PG["dbname"],
                                   "schema": dst_schema, "auth_method": "password_auth",
                                   "password_auth": {"username": PG["user"], "password": "***"}}
    assert prequel.get_destination(created["id"]) == created
    assert [d["id"] for d in prequel.list_destinations()] == [created["id"]]

    changed = prequel.update_destination(created["id"], postgres={"port": PG["port"], "password_auth": {
        "password": "an0ther"}}, is_enabled=False)
    assert changed["is_enabled"] is False
    assert changed["postgres"]["password_auth"]["password"] == "***"
    assert changed["recipient_id"] == recipient["id"]

    checks = prequel.test_connection(created["id"])
    assert checks["passed"] is True
    assert checks["checks"]
    assert all(c["outcome"] == "PASS" for c in checks["checks"])


def test_an_unknown_recipient_id_or_a_missing_credential_is_refused_naming_the_field(
        prequel: PrequelClient, dst_schema: str) -> None:
    connection = prequel.postgres(PG["host"], PG["port"], PG["dbname"], dst_schema, PG["user"], "pw")
    answer = prequel.http.post("/destinations", headers=prequel.headers, json={"destination": {
        "name": "acme_pg", "recipient_id": "1b4e28ba-2fa1-11d2-883f-0016d3cca427", **connection}})
    assert answer.status_code == 422
    (problem,) = answer.json()["errors"]
    assert problem["path"] == "destination.recipient_id"
    assert "GET /recipients" in problem["fix"]
    assert "\n" not in answer.json()["message"]

    recipient = prequel.create_recipient("acme", "acme-org")
    del connection["postgres"]["password_auth"]
    answer = prequel.http.post("/destinations", headers=prequel.headers, json={"destination": {
        "name": "acme_pg", "recipient_id": recipient["id"], **connection}})
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["path"] == "destination.postgres.password_auth"
    assert prequel.list_destinations() == []


def test_a_wrong_password_is_one_failed_check_with_its_fix(prequel: PrequelClient) -> None:
    recipient = prequel.create_recipient("acme", "acme-org")
    result = prequel.test_destination({
        "name": "acme_my", "recipient_id": recipient["id"], "vendor": "mysql", "mysql": {
            "host": MYSQL["host"], "port": MYSQL["port"], "database": "tp_prequel_client",
            "auth_method": "password_auth",
            "password_auth": {"username": MYSQL["user"], "password": "certainly-not-the-password"}}})
    assert result["passed"] is False
    failed = [c for c in result["checks"] if c["outcome"] == "FAIL"]
    assert len(failed) == 1, result["checks"]
    assert failed[0]["fix"], failed[0]
    assert "password" in failed[0]["fix"]
    assert all(set(c) >= {"check", "outcome", "detail", "fix"} for c in result["checks"])
    assert prequel.list_destinations() == []


def test_transfers_read_back_with_prequels_fields_and_filtered_by_destination_id(
        prequel: PrequelClient, platform_api: Api) -> None:
    prequel = PrequelClient(platform_api.client, platform_api.key)
    by_name = {d["name"]: d["id"] for d in prequel.list_destinations()}
    instance = dg.DagsterInstance.get()
    done = record(instance, "PARTIAL_FAILURE", created=T0, ended=T0, metrics=True, failure={
        "error": "permission denied for schema acme", "error_type": "PERMISSION_DENIED", "blame": "destination"})
    other = record(instance, "SUCCESS", created=T0, ended=T0, destination="globex_delta")

    transfer = prequel.get_transfer(done)
    assert transfer["destination_id"] == by_name["acme_delta"]
    assert transfer["is_full_refresh"] is False
    metrics = {m["model_name"]: m for m in transfer["model_metrics"]}
    assert metrics["items"]["rows_transferred"] == 21  # two windows of 10 and 11 rows
    assert metrics["items"]["delta_rows_transferred"] == 4
    assert metrics["items"]["volume_transferred_in_mb"] == 1.0
    assert metrics["items"]["most_recent_last_updated_at"] == T0.isoformat()
    assert metrics["items"]["error"] is None
    assert metrics["notes"]["rows_transferred"] is None  # nothing recorded: no number is made up
    assert metrics["notes"]["error"] == {"error_code": "PERMISSION_DENIED",
                                         "title": "permission denied for schema acme", "blame": "destination"}

    assert [t["id"] for t in prequel.list_transfers(destination_id=by_name["acme_delta"])] == [done]
    assert [t["id"] for t in prequel.list_transfers(destination_id=by_name["globex_delta"],
                                                    status="SUCCESS")] == [other]
    assert [t["id"] for t in prequel.list_transfers(destination_id=by_name["acme_delta"], page_size="1",
                                                    ended_after=T0.isoformat())] == [done]

    queued = prequel.transfer(by_name["globex_delta"], full_refresh=True, models=["items"])
    shown = prequel.get_transfer(queued["transfer_id"])
    assert (shown["is_full_refresh"], shown["destination_id"]) == (True, by_name["globex_delta"])
    (pending,) = shown["model_metrics"]
    assert pending["model_name"] == "items"
    assert pending["rows_transferred"] is None
    assert pending["volume_transferred_in_mb"] is None
    cancelled = prequel.call("POST", f"/transfers/{queued['transfer_id']}/cancel")
    assert cancelled["status"] == "CANCELLED"
