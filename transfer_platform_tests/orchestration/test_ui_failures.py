"""Failures show where users look: what the webserver's GraphQL (``/graphql``, the answers the UI
renders) says about a failed transfer, the sensor that moves an asset, and a run's tags.

A real instance, the repository's code location in process (``test_coordinator.workspace``) and
Dagster's GraphQL schema (``execute_dagster_graphql``: the same resolvers as ``/graphql``); runs
execute in process with real Spark and Delta. A model whose source folder does not exist fails
(``ConnectionFailure``) while the destination's other models succeed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.storage.tags import HIDDEN_TAG_PREFIX, TagType, get_tag_type  # pinned Dagster
from dagster._core.workspace.context import WorkspaceProcessContext

from transfer_platform.config.loading import load_config
from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration.scheduling.run_tags import (
    DAGSTER_HIDDEN_PREFIX,
    ROWS_TAG,
    STATUS_TAG,
    limit_tags,
)
from transfer_platform_tests.support.dagster import (
    CHECK_EXECUTIONS,
    CONFIG_ENV,
    RUN,
    graphql,
    last_check,
    transfer_run_config,
    workspace,
)
from transfer_platform_tests.support.platform import model, write_config

BROKEN = ["acme", "acme_delta", "broken"]
ITEMS = ["acme", "acme_delta", "items"]


AUTOMATIONS = """
query ($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    ... on AssetNode { jobNames targetingInstigators { __typename ... on Sensor { name } } }
  }
}"""


STEP_FAILURE = """
query ($runId: ID!) {
  logsForRun(runId: $runId) {
    ... on EventConnection { events { __typename
      ... on ExecutionStepFailureEvent { error { message } failureMetadata { description } } } }
  }
}"""


@pytest.fixture
def config_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """acme_delta receives items, notes and ``broken``, whose source folder does not exist."""
    path = write_config(tmp_path)
    config = yaml.safe_load(path.read_text())
    broken = model("broken")
    broken["source_table"] = "absent"
    config["models"].append(broken)
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv(CONFIG_ENV, str(path))
    return path


@pytest.fixture
def ui(config_path: Path) -> Iterator[tuple[dg.DagsterInstance, WorkspaceProcessContext]]:
    with dg.instance_for_test() as instance, workspace(instance) as context:
        yield instance, context


def test_the_schedule_sensor_is_each_transfer_assets_automation(ui) -> None:
    """The asset page's "Automation details" list the sensor that moves the asset (not "No
    automations found"), from the asset node's targeting instigators."""
    _, context = ui
    for path in (BROKEN, ITEMS):
        node = graphql(context, AUTOMATIONS, path=path)["assetNodeOrError"]
        assert {"__typename": "Sensor", "name": "transfer_schedule"} in node["targetingInstigators"], path
        # the UI's Materialize takes the first job the selected assets share: Dagster's asset job
        assert node["jobNames"] == ["__ASSET_JOB", "transfer_assets"], path
    # a source table is moved by nothing
    assert graphql(context, AUTOMATIONS, path=["source", "lake", "items"])["assetNodeOrError"][
        "targetingInstigators"] == []


def test_the_job_listing_the_transfer_assets_moves_nothing_and_says_what_to_launch(config_path: Path) -> None:
    """``transfer_assets`` is there for the UI to list the sensor on each asset's page; launched,
    it fails naming what moves rows, and records no materialization."""
    job = build_definitions(str(config_path)).resolve_job_def("transfer_assets")
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance, raise_on_error=False)
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data
        description = failure.user_failure_data.description
        assert "moves nothing" in description, description
        assert "transfer-platform transfer" in description, description
        assert result.get_asset_materialization_events() == []
        assert instance.get_latest_materialization_event(dg.AssetKey(ITEMS)) is None


def test_internal_tags_are_hidden_and_what_users_read_is_not(config_path: Path) -> None:
    """Dagster's webserver leaves out tags whose key starts with ``.dagster/``: every limit key
    is there, the destination, models and kind are not."""
    assert DAGSTER_HIDDEN_PREFIX == HIDDEN_TAG_PREFIX
    config = load_config(config_path)
    tags = limit_tags(config, "acme_delta", config.models, "integrity")
    visible = {k for k in tags if get_tag_type(k) != TagType.HIDDEN}
    assert visible == {"transfer_platform/destination", "transfer_platform/kind", "transfer_platform/models"}
    assert get_tag_type(STATUS_TAG) == get_tag_type(ROWS_TAG) == TagType.USER_PROVIDED


@pytest.mark.integration
def test_a_failed_model_fails_its_last_transfer_check_and_the_run_reads_first_why(config_path: Path, ui) -> None:
    instance, context = ui
    config = load_config(config_path)
    job = build_definitions(str(config_path)).resolve_job_def("transfer")
    result = job.execute_in_process(
        run_config=transfer_run_config("acme_delta"), instance=instance, raise_on_error=False,
        tags={**limit_tags(config, "acme_delta", config.models, "transfer"),
              ".dagster/transfer_platform/trigger": "sensor"})
    assert not result.success
    run_id = result.run_id

    broken = last_check(context, BROKEN)
    assert (broken["runId"], broken["status"]) == (run_id, "FAILED")
    assert broken["evaluation"]["severity"] == "ERROR"
    assert broken["evaluation"]["description"].startswith("ERROR: cannot reach folder ")
    assert broken["evaluation"]["description"].endswith("[blame: platform]")
    assert broken["metadata"]["error_type"] == "ConnectionFailure"
    assert broken["metadata"]["blame"] == "platform"
    assert "absent" in broken["metadata"]["error"]
    items = last_check(context, ITEMS)
    assert (items["runId"], items["status"]) == (run_id, "SUCCEEDED")
    assert items["evaluation"]["description"].startswith("SUCCESS: 12 row(s) in 4 window(s)")

    run = graphql(context, RUN, runId=run_id)["runOrError"]
    shown = {t["key"]: t["value"] for t in run["tags"]}
    assert not [k for k in shown if k.startswith(".dagster/")]
    assert {k: v for k, v in shown.items() if k.startswith("transfer_platform/")} == {
        "transfer_platform/destination": "acme_delta", "transfer_platform/kind": "transfer",
        "transfer_platform/models": "items,notes,broken",
        "transfer_platform/status": "PARTIAL_FAILURE", "transfer_platform/rows_transferred": "24"}
    stored = instance.get_run_by_id(run_id).tags  # the queue and the sweep still read them
    assert stored[".dagster/transfer_platform/model/broken"] == "acme_delta"
    assert stored[".dagster/transfer_platform/models_failed"] == "1"

    (failure,) = [e for e in graphql(context, STEP_FAILURE, runId=run_id)["logsForRun"]["events"]
                  if e["__typename"] == "ExecutionStepFailureEvent"]
    first = failure["failureMetadata"]["description"].splitlines()[0]
    assert first.startswith("PARTIAL_FAILURE: 1 of 3 model(s) failed. broken: cannot reach folder ")
    assert first.endswith("[blame: platform]")


@pytest.mark.integration
def test_materialize_reports_the_check_it_runs_with_the_asset(config_path: Path, ui) -> None:
    """The UI's Materialize runs the asset with its checks: the asset body answers last_transfer
    as a result of its own step, failed for the broken model."""
    instance, context = ui
    definitions = build_definitions(str(config_path))
    graph = definitions.resolve_asset_graph()
    keys = [dg.AssetKey(BROKEN), dg.AssetKey(ITEMS)]
    partition = graph.get(keys[0]).partitions_def.get_partition_keys()[0]
    result = definitions.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, asset_selection=keys, partition_key=partition, raise_on_error=False)
    assert not result.success
    broken, items = last_check(context, BROKEN), last_check(context, ITEMS)
    assert (broken["runId"], broken["status"]) == (result.run_id, "FAILED")
    assert broken["metadata"]["error_type"] == "ConnectionFailure"
    assert (items["runId"], items["status"]) == (result.run_id, "SUCCEEDED")
    shown = {t["key"]: t["value"] for t in graphql(context, RUN, runId=result.run_id)["runOrError"]["tags"]}
    assert shown["transfer_platform/status"] == "PARTIAL_FAILURE"
    # the execution Dagster planned for the run's partition is answered too, not left skipped
    executions = graphql(context, CHECK_EXECUTIONS.replace("limit: 1", "limit: 10"), path=BROKEN,
                         check="last_transfer")["assetCheckExecutions"]
    assert [e["status"] for e in executions] == ["FAILED", "FAILED"]
