"""A recipient with several destinations: acme's rows go to its PostgreSQL (``acme_pg``, a schema
of its own in the machine's database) and to its lake (``acme_delta``, a Delta path); globex has
one Delta destination. The Parquet lake holds rows of both tenants.

What a user expects: the configuration validates; each destination/model pair is an asset of its
own (``<recipient>/<destination>/<model>``) with its own partitions, check, watermark and run-queue
limits; materializing a window of each delivers acme's rows, and only acme's, to each; the sensor
requests every destination; ``transfers --destination`` lists only that destination's transfers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import psycopg
import pyarrow.parquet as pq
import pytest
import yaml
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon
from deltalake import DeltaTable

from transfer_platform.cli import main
from transfer_platform.config.loading import load_config
from transfer_platform.core.timeutil import isoformat
from transfer_platform.definitions import build_definitions
from transfer_platform.destinations.base import writer_for
from transfer_platform.orchestration.catalog.checks import (
    CHECK_NAME,
    JOB_NAME,
    integrity_check_keys,
    integrity_run_config,
)
from transfer_platform.orchestration.catalog.last_transfer import CHECK_NAME as LAST_TRANSFER
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.orchestration.scheduling.coordinator import (
    RunPlacementError,
    placement,
    tags_for,
)
from transfer_platform.orchestration.scheduling.repair import repair_requests
from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    dest_slots_key,
    model_key,
)
from transfer_platform_tests.support.dagster import (
    CONFIG_ENV,
    MOCKED_LAUNCHER,
    launch,
    queued_home,
    transfer_run_config,
    workspace,
)
from transfer_platform_tests.support.platform import TENANTS, dagster_home, write_config
from transfer_platform_tests.support.postgres import pg_connect, pg_connection_config

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

DESTINATIONS = {"acme_pg": "acme", "acme_delta": "acme", "globex_delta": "globex"}
MODELS = ("items", "notes")
PG_ITEMS = dg.AssetKey(["acme", "acme_pg", "items"])
DELTA_ITEMS = dg.AssetKey(["acme", "acme_delta", "items"])


def asset_key(destination: str, model: str) -> dg.AssetKey:
    return dg.AssetKey([DESTINATIONS[destination], destination, model])


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    """The small platform (lake ``items``/``notes`` over the last 3 days, acme_delta, globex_delta),
    plus ``acme_pg``: acme's PostgreSQL, in a schema of its own (created by the first transfer;
    nothing connects to the database before, so the tests without a transfer need none)."""
    path = write_config(tmp_path, destinations={"acme": {"frequency_minutes": 15},
                                                "globex": {"frequency_minutes": 60}})
    raw = yaml.safe_load(path.read_text())
    raw["destinations"].insert(0, {"name": "acme_pg", "recipient": "acme", "vendor": "postgres",
                                   "connection": pg_connection_config(f"tp_dst_{uuid.uuid4().hex[:10]}"),
                                   "frequency_minutes": 60})
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture
def delivered_config_path(config_path: Path, pg_conn: psycopg.Connection) -> Iterator[Path]:
    """``config_path``, with acme_pg's schema dropped after the test."""
    yield config_path
    schema = load_config(config_path).destination("acme_pg").connection.schema_
    pg_conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_recipient_with_two_destinations_validates(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_path), "validate"]) == 0, capsys.readouterr().err
    config = load_config(config_path)
    assert [d.name for d in config.destinations if d.recipient == "acme"] == ["acme_pg", "acme_delta"]

    # two destinations of the recipient at one place are still refused: their watermarks would mix
    raw = yaml.safe_load(config_path.read_text())
    raw["destinations"].append({"name": "acme_delta_again", "recipient": "acme", "vendor": "delta",
                                "connection": {"path": "dest_acme"}})
    config_path.write_text(yaml.safe_dump(raw))
    capsys.readouterr()
    assert main(["--config", str(config_path), "validate"]) == 2
    assert "acme_delta, acme_delta_again write to the same place" in capsys.readouterr().err


def test_each_destination_and_model_is_an_asset_with_its_partitions_and_check(config_path: Path) -> None:
    graph = build_definitions(str(config_path)).resolve_asset_graph()
    expected = {asset_key(d, m) for d in DESTINATIONS for m in MODELS}
    transfer_keys = {k for k in graph.get_all_asset_keys() if k.path[0] != "source"}
    assert transfer_keys == expected
    days = None
    for key in expected:
        node = graph.get(key)
        destination = key.path[1]
        assert node.group_name == destination  # "Materialize all" in a group: one destination
        assert node.assets_def.op.name == f"transfer__{destination}"
        assert node.metadata["destination"] == destination
        assert dg.AssetKey(["source", "lake", key.path[2]]) in node.parent_keys
        assert node.partitions_def.cron_schedule == "0 0 * * *"
        days = days or node.partitions_def.get_partition_keys()
        assert node.partitions_def.get_partition_keys() == days  # 3 days of rows and today
    assert len(days) == 4
    assert set(graph.asset_check_keys) == {dg.AssetCheckKey(k, name) for k in expected
                                           for name in (CHECK_NAME, LAST_TRANSFER)}
    config = load_config(config_path)
    for destination in DESTINATIONS:
        assert set(integrity_check_keys(config, destination)) == {
            dg.AssetCheckKey(asset_key(destination, m), CHECK_NAME) for m in MODELS}


def test_the_sensor_requests_every_destination_of_the_recipient(config_path: Path) -> None:
    sensor = build_definitions(str(config_path)).resolve_sensor_def("transfer_schedule")
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(
            instance=instance, resources={"platform": TransferPlatformResource(config_path=str(config_path))})
        result = sensor(context)
    transfers = [r for r in result.run_requests if r.job_name == "transfer"]
    found = {r.run_config["ops"]["run_transfer"]["config"]["destination"]: r for r in transfers}
    assert set(found) == set(DESTINATIONS)  # first sight: every destination is due at once
    assert len(transfers) == len(DESTINATIONS)
    for destination, request in found.items():
        assert request.tags[DESTINATION_TAG] == destination
        assert request.run_key.startswith(f"{destination}@")


def test_runs_are_placed_per_destination_and_a_run_over_both_is_refused(config_path: Path) -> None:
    config = load_config(config_path)
    pg_run = dg.DagsterRun(job_name="__ASSET_JOB", asset_selection=frozenset({PG_ITEMS}))
    delta_run = dg.DagsterRun(job_name="__ASSET_JOB", asset_selection=frozenset(
        {DELTA_ITEMS, asset_key("acme_delta", "notes")}))
    assert placement(config, pg_run) == ("acme_pg", ["items"], "transfer")
    destination, models, kind = placement(config, delta_run)
    assert (destination, sorted(models), kind) == ("acme_delta", ["items", "notes"], "transfer")
    check_run = dg.DagsterRun(job_name="__ASSET_JOB", asset_check_selection=frozenset(  # `Execute checks`
        {dg.AssetCheckKey(PG_ITEMS, CHECK_NAME)}))
    assert placement(config, check_run) == ("acme_pg", ["items"], "integrity")
    both = dg.DagsterRun(job_name="__ASSET_JOB", asset_selection=frozenset({PG_ITEMS, DELTA_ITEMS}))
    with pytest.raises(RunPlacementError, match=r"several destinations \(acme_delta, acme_pg\)"):
        placement(config, both)
    # the limits are the destination's: the same model of the same recipient counts apart
    pg_tags, delta_tags = tags_for(config, pg_run), tags_for(config, delta_run)
    assert pg_tags[dest_slots_key(1)] == "acme_pg"
    assert delta_tags[dest_slots_key(1)] == "acme_delta"
    assert (pg_tags[model_key("items")], delta_tags[model_key("items")]) == ("acme_pg", "acme_delta")


def test_the_queue_runs_transfers_to_both_destinations_at_once_and_limits_each(
        config_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One slot per destination: a Materialize of acme's items into its PostgreSQL and one into
    its lake start together; a second transfer into the PostgreSQL waits for the first."""
    monkeypatch.setenv(CONFIG_ENV, str(config_path))
    home = queued_home(tmp_path, run_launcher=MOCKED_LAUNCHER)
    with dg.DagsterInstance.from_config(str(home)) as instance, workspace(instance) as context:
        into_pg = launch(instance, context, "__ASSET_JOB", asset_selection={PG_ITEMS})
        into_delta = launch(instance, context, "__ASSET_JOB", asset_selection={DELTA_ITEMS})
        pg_again = launch(instance, context, "transfer", run_config=transfer_run_config("acme_pg", models=["notes"]))
        list(QueuedRunCoordinatorDaemon(interval_seconds=1).run_iteration(context))

        def status(run: dg.DagsterRun) -> dg.DagsterRunStatus:
            return instance.get_run_by_id(run.run_id).status

        assert (status(into_pg), status(into_delta)) == (dg.DagsterRunStatus.STARTING,) * 2
        assert status(pg_again) == dg.DagsterRunStatus.QUEUED  # acme_pg's only slot is taken
        assert instance.get_run_by_id(into_pg.run_id).tags[DESTINATION_TAG] == "acme_pg"
        assert instance.get_run_by_id(into_delta.run_id).tags[DESTINATION_TAG] == "acme_delta"


def test_a_failed_check_is_repaired_in_its_own_destination_only(config_path: Path) -> None:
    """acme_pg's check of items failed (a recorded evaluation naming one window to repair): the
    self-healing sensor transfers that window again into acme_pg, and touches nothing of acme_delta."""
    config = load_config(config_path)
    start, end = "2025-05-01T00:00:00+00:00", "2025-05-02T00:00:00+00:00"
    with dg.instance_for_test() as instance:
        instance.report_runless_asset_event(dg.AssetCheckEvaluation(
            asset_key=PG_ITEMS, check_name=CHECK_NAME, passed=False,
            metadata={"missing": 1, "repair_windows": dg.MetadataValue.json([[start, end]])}))
        instance.report_runless_asset_event(dg.AssetCheckEvaluation(
            asset_key=DELTA_ITEMS, check_name=CHECK_NAME, passed=True, metadata={"missing": 0}))
        requests, _ = repair_requests(config, instance, {}, datetime.now(UTC))
    (request,) = requests
    assert request.run_config == transfer_run_config("acme_pg", models=["items"], start=start, end=end)
    assert request.tags[DESTINATION_TAG] == "acme_pg"


# -- the data path: real Spark, PostgreSQL, Delta and a Dagster instance -------------------------------

def lake_rows(config_path: Path, since: datetime, until: datetime) -> list[dict]:
    rows = pq.read_table(config_path.parent / "lake" / "items").to_pylist()
    return sorted((r for r in rows if r["organization_id"] == TENANTS["acme"] and since <= r["updated_at"] < until),
                  key=lambda r: r["id"])


def pg_rows(config_path: Path) -> list[dict]:
    schema = load_config(config_path).destination("acme_pg").connection.schema_
    with pg_connect() as conn, conn.cursor() as cursor:
        cursor.execute(f'SELECT id, organization_id, updated_at, v FROM "{schema}".items ORDER BY id')
        return [dict(zip(("id", "organization_id", "updated_at", "v"), row, strict=True)) for row in cursor]


def delta_rows(config_path: Path) -> list[dict]:
    table = DeltaTable(str(config_path.parent / "dest_acme" / "items")).to_pyarrow_table()
    return sorted(table.select(["id", "organization_id", "updated_at", "v"]).to_pylist(), key=lambda r: r["id"])


def watermark(config_path: Path, destination: str) -> datetime | None:
    config = load_config(config_path)
    writer = writer_for(config.destination(destination))
    try:
        return writer.committed_state(config.model("items")).state.watermark
    finally:
        writer.close()


@pytest.mark.integration
def test_a_window_of_each_destination_delivers_the_recipients_rows_to_each_with_its_own_watermark(
        delivered_config_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], spark) -> None:
    config_path = delivered_config_path
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home(tmp_path)))  # the shipped dagster.yaml
    monkeypatch.setenv(CONFIG_ENV, str(config_path))  # read by its run coordinator
    defs = build_definitions(str(config_path))
    days = defs.resolve_asset_graph().get(PG_ITEMS).partitions_def.get_partition_keys()
    day0 = datetime.fromisoformat(days[0]).replace(tzinfo=UTC)
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.DagsterInstance.get() as instance:
        # the PostgreSQL gets the first day; the lake, in one run, the first two
        into_pg = job.execute_in_process(instance=instance, asset_selection=[PG_ITEMS], partition_key=days[0])
        into_delta = job.execute_in_process(instance=instance, asset_selection=[DELTA_ITEMS], tags={
            "dagster/asset_partition_range_start": days[0], "dagster/asset_partition_range_end": days[1]})
        assert into_pg.success
        assert into_delta.success

        assert instance.get_materialized_partitions(PG_ITEMS) == {days[0]}
        assert instance.get_materialized_partitions(DELTA_ITEMS) == {days[0], days[1]}
        for untouched in (asset_key("acme_pg", "notes"), asset_key("acme_delta", "notes"),
                          asset_key("globex_delta", "items")):
            assert instance.get_materialized_partitions(untouched) == set()

        # each destination's integrity check compares its own table, against its own watermark
        evaluations = {}
        for destination in ("acme_pg", "acme_delta"):  # the integrity job, one destination per run
            checked = defs.resolve_job_def(JOB_NAME).execute_in_process(
                run_config=integrity_run_config(destination, ["items"]), instance=instance, raise_on_error=False)
            evaluations.update({e.asset_key: e for e in checked.get_asset_check_evaluations()})
    assert set(evaluations) == {PG_ITEMS, DELTA_ITEMS}
    assert all(e.passed for e in evaluations.values()), [e.description for e in evaluations.values()]

    expected_pg = lake_rows(config_path, day0, day0 + timedelta(days=1))
    expected_delta = lake_rows(config_path, day0, day0 + timedelta(days=2))
    assert (len(expected_pg), len(expected_delta)) == (4, 8)
    assert pg_rows(config_path) == expected_pg  # acme's rows of that day, no globex row
    assert delta_rows(config_path) == expected_delta
    assert watermark(config_path, "acme_pg") == day0 + timedelta(days=1)
    assert watermark(config_path, "acme_delta") == day0 + timedelta(days=2)
    assert {k: e.metadata["watermark"].value for k, e in evaluations.items()} == {
        PG_ITEMS: isoformat(day0 + timedelta(days=1)), DELTA_ITEMS: isoformat(day0 + timedelta(days=2))}

    # transfers --destination lists only that destination's transfers
    def listed(*argv: str) -> list[dict]:
        capsys.readouterr()
        assert main(["transfers", "--json", *argv]) == 0
        return json.loads(capsys.readouterr().out)

    (pg_transfer,) = listed("--destination", "acme_pg")
    (delta_transfer,) = listed("--destination", "acme_delta")
    assert (pg_transfer["id"], delta_transfer["id"]) == (into_pg.run_id, into_delta.run_id)
    assert pg_transfer["destination"] == "acme_pg"
    assert pg_transfer["models"]["items"]["windows"] == 1
    assert pg_transfer["rows_transferred"] == 4
    assert delta_transfer["models"]["items"]["windows"] == 2
    assert delta_transfer["rows_transferred"] == 8
    assert listed("--destination", "globex_delta") == []
    capsys.readouterr()
    assert main(["transfers", "--destination", "acme_pg"]) == 0
    text = capsys.readouterr().out
    assert into_pg.run_id in text
    assert into_delta.run_id not in text

    # a transfer from the command line reports its window on that destination's asset only
    capsys.readouterr()
    assert main(["transfer", "acme_pg", "--model", "items", "--start", days[1], "--end", days[2]]) == 0
    (summary,) = json.loads(capsys.readouterr().out)["models"]
    # (the read starts at the last delivered row, so that one is read again: new rows are the delta)
    assert (summary["model"], summary["windows"], summary["delta_rows_transferred"]) == ("items", 1, 4)
    assert pg_rows(config_path) == lake_rows(config_path, day0, day0 + timedelta(days=2))
    with dg.DagsterInstance.get() as instance:
        assert instance.get_materialized_partitions(PG_ITEMS) == {days[0], days[1]}
        assert len(instance.fetch_materializations(PG_ITEMS, limit=10).records) == 2
        assert len(instance.fetch_materializations(DELTA_ITEMS, limit=10).records) == 2  # its two windows
