"""The ``transfer`` job against a small platform (Parquet lake -> Delta), and the transfers it
makes as ``list_transfers`` / ``describe`` / ``cancel`` report them.

Executed in process (real Spark, real Delta, a real instance): SUCCESS, PARTIAL_FAILURE and ERROR
for real, each model's windows reported as materializations of ``acme/acme_delta/<model>``. Submitted to a
queued instance (the shipped ``dagster.yaml``; nothing dequeues): PENDING, CANCELLED, EXPIRED.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transfer_platform.config.loading import load_config
from transfer_platform.core.lifecycle import HEARTBEAT_TAG, MODELS_FAILED_TAG, MODELS_SUCCEEDED_TAG
from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration.runs.lifecycle import sweep
from transfer_platform.orchestration.runs.transfers import (
    TransferFilter,
    cancel,
    describe,
    list_transfers,
)
from transfer_platform.orchestration.scheduling.run_tags import STATUS_TAG
from transfer_platform_tests.support.dagster import (
    CONFIG_ENV,
    ITEMS,
    RUN,
    TEAM,
    execute,
    graphql,
    lake_rows,
    last_check,
    launch,
    queued_home,
    transfer_run_config,
    workspace,
)
from transfer_platform_tests.support.platform import TENANTS, delivered, write_config

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

NOTES = dg.AssetKey(["acme", "acme_delta", "notes"])


@pytest.fixture
def platform(tmp_path: Path) -> Path:
    """acme_delta receives items and notes: 12 acme rows each over the last 3 days (4 a day)."""
    return write_config(tmp_path)


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as test_instance:
        yield test_instance


def daily_keys(config_path: Path) -> list[str]:
    """The models' daily partitions: the 3 days of rows and today, the window in progress."""
    keys = build_definitions(str(config_path)).resolve_asset_graph().get(ITEMS).partitions_def.get_partition_keys()
    assert len(keys) == 4
    return keys


def windows(result: dg.ExecuteInProcessResult, key: dg.AssetKey) -> list[tuple[str, int]]:
    return [(e.partition, e.metadata["rows_transferred"].value)
            for e in result.asset_materializations_for_node("run_transfer") if e.asset_key == key]


def only_transfer(instance: dg.DagsterInstance, **wanted) -> dict:
    (transfer,) = list_transfers(instance, TransferFilter(**wanted))
    return transfer


def corrupt(config_path: Path, table: str) -> None:
    (config_path.parent / "lake" / table / "part-0.parquet").write_bytes(b"not parquet at all")


def duplicate_a_key(config_path: Path, table: str) -> None:
    path = config_path.parent / "lake" / table / "part-0.parquet"
    rows = pq.read_table(path).to_pylist()
    first = next(r for r in rows if r["organization_id"] == TENANTS["acme"])
    pq.write_table(pa.Table.from_pylist([*rows, {**first, "v": "duplicate"}], schema=pq.read_schema(path)), path)


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text)


# -- SUCCESS -----------------------------------------------------------------------------------------

def test_success_moves_every_model_and_reports_one_materialization_per_window(
        platform: Path, instance: dg.DagsterInstance, spark) -> None:
    keys = daily_keys(platform)
    before = datetime.now(UTC)
    result = execute(platform, instance)
    assert result.success
    for key, table in ((ITEMS, "items"), (NOTES, "notes")):
        assert windows(result, key) == [(k, 4) for k in keys[:3]] + [(keys[3], 0)]
        assert instance.get_materialized_partitions(key) == set(keys)
        assert delivered(platform.parent, "acme", table) == lake_rows(platform, table)
    assert {e.asset_key for e in result.asset_materializations_for_node("run_transfer")} == {ITEMS, NOTES}
    run = instance.get_run_by_id(result.run_id)
    assert run.tags[MODELS_SUCCEEDED_TAG] == "2"
    assert run.tags[MODELS_FAILED_TAG] == "0"
    assert HEARTBEAT_TAG in run.tags

    transfer = only_transfer(instance, destination="acme_delta")
    assert transfer["id"] == result.run_id
    assert transfer["status"] == "SUCCESS"
    assert transfer["errors"] == []
    assert before <= moment(transfer["submitted_at"]) <= moment(transfer["started_at"]) \
        <= moment(transfer["ended_at"]) <= datetime.now(UTC)
    assert (transfer["start_transfer_window_at"], transfer["end_transfer_window_at"]) == (None, None)
    assert transfer["full_refresh"] is False
    assert transfer["tags"] == {"team": "data"}
    assert transfer["rows_transferred"] == 24
    assert transfer["delta_rows_transferred"] == 24
    for table in ("items", "notes"):
        metrics = transfer["models"][table]
        assert metrics["windows"] == 4
        assert metrics["rows_transferred"] == len(lake_rows(platform, table)) == 12
        assert metrics["delta_rows_transferred"] == 12
        assert metrics["volume_transferred_in_mb"] > 0
        newest = max(r["updated_at"] for r in lake_rows(platform, table))
        assert moment(metrics["most_recent_last_updated_at"]) == newest
    assert transfer["volume_transferred_in_mb"] == pytest.approx(
        sum(m["volume_transferred_in_mb"] for m in transfer["models"].values()), abs=1e-4)


def test_models_restrict_the_models_and_full_refresh_rebuilds_them(
        platform: Path, instance: dg.DagsterInstance, spark) -> None:
    keys = daily_keys(platform)
    first = execute(platform, instance, models=["items"])
    assert first.success
    assert windows(first, NOTES) == []
    assert not (platform.parent / "dest_acme" / "notes").exists()
    assert instance.get_materialized_partitions(NOTES) == set()
    assert delivered(platform.parent, "acme", "items") == lake_rows(platform, "items")

    refresh = execute(platform, instance, models=["items"], full_refresh=True)
    assert refresh.success
    events = list(refresh.asset_materializations_for_node("run_transfer"))
    assert [(e.asset_key, e.partition) for e in events] == [(ITEMS, k) for k in keys]
    assert all(e.metadata["full_refresh"].value for e in events)
    assert sum(e.metadata["rows_transferred"].value for e in events) == 12  # rebuilt from the start
    assert delivered(platform.parent, "acme", "items") == lake_rows(platform, "items")
    transfers = {t["id"]: t for t in list_transfers(instance, TransferFilter(status="SUCCESS"))}
    assert transfers[refresh.run_id]["models"]["items"]["rows_transferred"] == 12
    assert set(transfers[refresh.run_id]["models"]) == {"items"}


def test_start_and_end_restrict_the_windows(platform: Path, instance: dg.DagsterInstance, spark) -> None:
    keys = daily_keys(platform)
    start = datetime.fromisoformat(keys[1]).replace(tzinfo=UTC)
    end = start + timedelta(days=1)
    result = execute(platform, instance, models=["notes"], start=start.isoformat(), end=end.isoformat())
    assert result.success
    assert windows(result, NOTES) == [(keys[1], 4)]
    assert windows(result, ITEMS) == []
    assert instance.get_materialized_partitions(NOTES) == {keys[1]}
    assert delivered(platform.parent, "acme", "notes") == lake_rows(platform, "notes", since=start, until=end)
    transfer = only_transfer(instance)
    assert (transfer["start_transfer_window_at"], transfer["end_transfer_window_at"]) == (
        start.isoformat(), end.isoformat())
    assert transfer["rows_transferred"] == 4
    assert transfer["models"]["notes"]["windows"] == 1


# -- PARTIAL_FAILURE and ERROR ------------------------------------------------------------------------

def test_a_failing_model_does_not_stop_the_others_partial_failure(
        platform: Path, instance: dg.DagsterInstance, spark) -> None:
    keys = daily_keys(platform)
    corrupt(platform, "items")  # the first model fails; notes must still move
    result = execute(platform, instance)
    assert not result.success
    assert instance.get_materialized_partitions(ITEMS) == set()
    assert instance.get_materialized_partitions(NOTES) == set(keys)
    assert delivered(platform.parent, "acme", "notes") == lake_rows(platform, "notes")
    run = instance.get_run_by_id(result.run_id)
    assert (run.tags[MODELS_SUCCEEDED_TAG], run.tags[MODELS_FAILED_TAG]) == ("1", "1")

    transfer = only_transfer(instance, destination="acme_delta", status="PARTIAL_FAILURE")
    assert transfer["id"] == result.run_id
    assert transfer["ended_at"] is not None
    assert set(transfer["models"]) == {"notes"}
    assert transfer["rows_transferred"] == 12
    (error,) = transfer["errors"]
    assert error["step"] == "run_transfer"
    assert error["error"].startswith("PARTIAL_FAILURE: 1 of 2 model(s) failed. items: model 'items' -> "
                                     "destination 'acme_delta': reading ")
    assert "part-0.parquet" in error["error"]
    assert "notes" not in error["error"]
    assert list_transfers(instance, TransferFilter(status="SUCCESS")) == []


def test_a_materialize_of_several_models_where_one_fails_is_a_partial_failure(
        platform: Path, instance: dg.DagsterInstance, spark) -> None:
    """The UI's Materialize (and a single-run backfill) of both assets: one step moves both models,
    as the ``transfer`` job does, and is told from ERROR the same way."""
    keys = daily_keys(platform)
    corrupt(platform, "items")
    job = build_definitions(str(platform)).resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(instance=instance, asset_selection=[ITEMS, NOTES], raise_on_error=False,
                                    tags={"dagster/asset_partition_range_start": keys[0],
                                          "dagster/asset_partition_range_end": keys[-1]})
    assert not result.success
    assert instance.get_materialized_partitions(NOTES) == set(keys)
    run = instance.get_run_by_id(result.run_id)
    assert (run.tags[MODELS_SUCCEEDED_TAG], run.tags[MODELS_FAILED_TAG]) == ("1", "1")
    transfer = only_transfer(instance, destination="acme_delta", status="PARTIAL_FAILURE")
    assert transfer["id"] == result.run_id
    assert set(transfer["models"]) == {"notes"}

    duplicate_a_key(platform, "notes")  # now both fail: ERROR
    again = job.execute_in_process(instance=instance, asset_selection=[ITEMS, NOTES], raise_on_error=False,
                                   tags={"dagster/asset_partition_range_start": keys[0],
                                         "dagster/asset_partition_range_end": keys[-1]})
    assert describe(instance, instance.get_run_record_by_id(again.run_id))["status"] == "ERROR"


def test_every_model_failing_is_an_error(platform: Path, instance: dg.DagsterInstance, spark) -> None:
    corrupt(platform, "items")
    duplicate_a_key(platform, "notes")
    result = execute(platform, instance)
    assert not result.success
    run = instance.get_run_by_id(result.run_id)
    assert (run.tags[MODELS_SUCCEEDED_TAG], run.tags[MODELS_FAILED_TAG]) == ("0", "2")
    assert instance.get_materialized_partitions(ITEMS) == set()
    assert instance.get_materialized_partitions(NOTES) == set()
    transfer = only_transfer(instance, status="ERROR")
    (error,) = transfer["errors"]
    assert error["error"].startswith("ERROR: 2 of 2 model(s) failed. items: ")
    assert "model 'notes' (DataError, blame: provider): " in error["error"]
    assert "two different versions of key" in error["error"]
    assert transfer["rows_transferred"] == 0
    assert transfer["models"] == {}


def run_unknown_model(config_path: Path, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """A run that fails before moving anything (the Spark session is never started)."""
    job = build_definitions(str(config_path)).resolve_job_def("transfer")
    return job.execute_in_process(run_config=transfer_run_config("acme_delta", models=["nope"]),
                                  instance=instance, raise_on_error=False)


def test_a_model_the_destination_does_not_receive_fails_the_run(platform: Path,
                                                                instance: dg.DagsterInstance) -> None:
    refused = run_unknown_model(platform, instance)
    assert not refused.success
    transfer = describe(instance, instance.get_run_record_by_id(refused.run_id))
    assert transfer["status"] == "ERROR"
    assert "does not receive model(s) ['nope']" in transfer["errors"][0]["error"]
    assert "it receives ['items', 'notes']" in transfer["errors"][0]["error"]


def test_a_run_executed_in_process_is_listed_under_its_destination(platform: Path,
                                                                   instance: dg.DagsterInstance) -> None:
    refused = run_unknown_model(platform, instance)
    assert describe(instance, instance.get_run_record_by_id(refused.run_id))["destination"] == "acme_delta"


# -- PENDING, CANCELLED, EXPIRED on a queued instance -------------------------------------------------

@pytest.fixture
def queued(platform: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple]:
    monkeypatch.setenv(CONFIG_ENV, str(platform))
    with dg.DagsterInstance.from_config(str(queued_home(tmp_path))) as queued_instance, \
            workspace(queued_instance) as context:
        yield queued_instance, context


def test_pending_cancelled_and_expired_transfers(queued) -> None:
    instance, context = queued
    before = datetime.now(UTC)
    window = {"start": "2025-01-01T00:00:00+00:00", "end": "2025-01-02T00:00:00+00:00"}
    pending = launch(instance, context, "transfer", tags=TEAM,
                     run_config=transfer_run_config("acme_delta", models=["items"], **window))
    cancelled = launch(instance, context, "transfer", run_config=transfer_run_config("acme_delta"))
    expired = launch(instance, context, "transfer", run_config=transfer_run_config("acme_delta"))

    transfer = only_transfer(instance, tags={"team": "data"})
    assert transfer["id"] == pending.run_id
    assert transfer["status"] == "PENDING"
    assert transfer["destination"] == "acme_delta"
    assert before <= moment(transfer["submitted_at"]) <= datetime.now(UTC)
    assert transfer["started_at"] is None
    assert transfer["ended_at"] is None
    assert (transfer["start_transfer_window_at"], transfer["end_transfer_window_at"]) == (
        window["start"], window["end"])
    assert (transfer["rows_transferred"], transfer["models"], transfer["errors"]) == (0, {}, [])
    assert transfer["tags"] == {"team": "data"}

    assert cancel(instance, cancelled.run_id) == "CANCELLED"
    gone = describe(instance, instance.get_run_record_by_id(cancelled.run_id))
    assert gone["started_at"] is None
    assert gone["ended_at"] is not None
    ended = moment(gone["ended_at"])
    assert [t["id"] for t in list_transfers(instance, TransferFilter(ended_after=ended))] == [cancelled.run_id]
    assert list_transfers(instance, TransferFilter(ended_before=ended)) == []  # exclusive
    assert [t["id"] for t in list_transfers(instance, TransferFilter(
        ended_before=ended + timedelta(seconds=1)))] == [cancelled.run_id]

    swept = sweep(instance, datetime.now(UTC) + timedelta(hours=7), load_config(os.environ[CONFIG_ENV]))
    assert sorted(swept["expired"]) == sorted([pending.run_id, expired.run_id])
    # where users look (GraphQL): each run's visible status, the expired models' last_transfer check
    shown = {r.run_id: {t["key"]: t["value"] for t in graphql(context, RUN, runId=r.run_id)["runOrError"]["tags"]}
             for r in (pending, cancelled, expired)}
    assert [shown[r.run_id].get(STATUS_TAG) for r in (pending, cancelled, expired)] == [
        "EXPIRED", "CANCELLED", "EXPIRED"]
    for model in ("items", "notes"):
        check = last_check(context, ["acme", "acme_delta", model])
        assert (check["runId"], check["status"], check["metadata"]["status"]) == ("", "FAILED", "EXPIRED")
        assert check["evaluation"]["description"].startswith("EXPIRED: pending for more than 6:00:00")
    statuses = {t["id"]: t["status"] for t in list_transfers(instance, TransferFilter(destination="acme_delta"))}
    assert statuses == {pending.run_id: "EXPIRED", cancelled.run_id: "CANCELLED", expired.run_id: "EXPIRED"}
    assert [t["id"] for t in list_transfers(instance, TransferFilter(status="CANCELLED"))] == [cancelled.run_id]
    assert list_transfers(instance, TransferFilter(status="PENDING")) == []
    assert list_transfers(instance, TransferFilter(destination="globex_delta")) == []
    assert list_transfers(instance, TransferFilter(tags={"team": "other"})) == []
    assert len(list_transfers(instance, TransferFilter(limit=2))) == 2


def test_cancel_refuses_what_is_not_a_transfer(queued) -> None:
    instance, _ = queued
    with pytest.raises(LookupError, match="no transfer with id 'nope'"):
        cancel(instance, "nope")


def test_a_full_refresh_asked_in_run_config_is_listed_as_one(queued) -> None:
    instance, context = queued
    run = launch(instance, context, "transfer", run_config=transfer_run_config("acme_delta", full_refresh=True))
    assert describe(instance, instance.get_run_record_by_id(run.run_id))["full_refresh"] is True
