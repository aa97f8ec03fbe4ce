"""A Dagster instance and code location for the orchestration tests: runs created and launched as
``dagster job launch`` and the UI do, the transfer job executed in process, GraphQL queries.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import yaml
from dagster._core.definitions.selector import JobSubsetSelector
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster_graphql.test.utils import execute_dagster_graphql

from transfer_platform.config.loading import load_config
from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration.scheduling.run_tags import (
    USER_TAG_PREFIX,
    limit_tags,
)
from transfer_platform_tests.support.platform import TENANTS, dagster_home

CONFIG_ENV = "TRANSFER_PLATFORM_CONFIG"


MOCKED_LAUNCHER = {"module": "dagster._core.test_utils", "class": "MockedRunLauncher"}


def queued_home(root: Path, **extra: dict) -> Path:
    """``support.platform.dagster_home`` (the shipped ``dagster.yaml``), plus top-level keys
    (``run_launcher``) or ``run_coordinator_config`` entries merged into the coordinator's config."""
    home = dagster_home(root)
    settings = yaml.safe_load((home / "dagster.yaml").read_text())
    settings["run_coordinator"]["config"].update(extra.pop("run_coordinator_config", {}))
    settings.update(extra)
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    return home


@contextmanager
def workspace(instance: dg.DagsterInstance) -> Iterator[WorkspaceProcessContext]:
    """The code location of ``workspace.yaml`` (``transfer_platform.definitions:defs``), in process."""
    origin = InProcessCodeLocationOrigin(LoadableTargetOrigin(
        executable_path=sys.executable, module_name="transfer_platform.definitions", attribute="defs"))
    with WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget([origin])) as context:
        yield context


def create(instance: dg.DagsterInstance, context: WorkspaceProcessContext, job_name: str, *,
           run_config: dict | None = None, tags: dict[str, str] | None = None,
           asset_selection: set[dg.AssetKey] | None = None,
           asset_check_selection: set[dg.AssetCheckKey] | None = None) -> dg.DagsterRun:
    """Create a run as ``dagster job launch`` and the UI's launchRun do (job tags merged under
    the given ones; subset selections kept), not submitted yet."""
    request = context.create_request_context()
    location = next(iter(request.get_code_location_entries().values())).code_location
    repository = location.get_repository("__repository__")
    selector = JobSubsetSelector(location_name=location.name, repository_name=repository.name,
                                 job_name=job_name, op_selection=None, asset_selection=asset_selection,
                                 asset_check_selection=asset_check_selection)
    remote_job = location.get_job(selector)
    plan = location.get_execution_plan(remote_job, run_config or {}, step_keys_to_execute=None,
                                       known_state=None, instance=instance).execution_plan_snapshot
    run = instance.create_run(
        job_name=job_name, run_id=None, run_config=run_config or {},
        resolved_op_selection=remote_job.resolved_op_selection,
        step_keys_to_execute=plan.step_keys_to_execute, op_selection=None, status=None,
        root_run_id=None, parent_run_id=None, tags={**remote_job.tags, **(tags or {})},
        job_snapshot=remote_job.job_snapshot, execution_plan_snapshot=plan,
        parent_job_snapshot=remote_job.parent_job_snapshot,
        remote_job_origin=remote_job.get_remote_origin(), job_code_origin=remote_job.get_python_origin(),
        asset_selection=frozenset(asset_selection) if asset_selection else None,
        asset_check_selection=frozenset(asset_check_selection) if asset_check_selection else None,
        asset_graph=repository.asset_graph,
    )
    return run


def launch(instance: dg.DagsterInstance, context: WorkspaceProcessContext, job_name: str,
           **selection) -> dg.DagsterRun:
    """:func:`create` a run, then submit it to the instance's run coordinator (the queue)."""
    run = create(instance, context, job_name, **selection)
    return instance.submit_run(run.run_id, context.create_request_context())


def transfer_run_config(destination: str, **fields) -> dict:
    return {"ops": {"run_transfer": {"config": {"destination": destination, **fields}}}}


RUN = """
query ($runId: ID!) {
  runOrError(runId: $runId) {
    ... on Run { status tags { key value } }
  }
}"""


def graphql(context: WorkspaceProcessContext, query: str, **variables) -> dict:
    result = execute_dagster_graphql(context.create_request_context(), query, variables)
    assert not result.errors, result.errors
    return result.data


def last_check(context: WorkspaceProcessContext, path: list[str], check: str = "last_transfer") -> dict:
    (execution,) = graphql(context, CHECK_EXECUTIONS, path=path, check=check)["assetCheckExecutions"]
    metadata = {e["label"]: e.get("text") for e in execution["evaluation"]["metadataEntries"]}
    return {**execution, "metadata": metadata}


ITEMS = dg.AssetKey(["acme", "acme_delta", "items"])


def execute(config_path: Path, instance: dg.DagsterInstance, **op_config) -> dg.ExecuteInProcessResult:
    """Run the job in this process, tagged as the run coordinator tags a queued transfer."""
    config = load_config(config_path)
    models = [config.model(m) for m in op_config.get("models", [])] or config.models
    tags = {**limit_tags(config, "acme_delta", models, "transfer"), **TEAM}
    job = build_definitions(str(config_path)).resolve_job_def("transfer")
    return job.execute_in_process(run_config=transfer_run_config("acme_delta", **op_config),
                                  instance=instance, tags=tags, raise_on_error=False)


def lake_rows(config_path: Path, table: str, since: datetime | None = None,
              until: datetime | None = None) -> list[dict]:
    rows = pq.read_table(config_path.parent / "lake" / table).to_pylist()
    return sorted((r for r in rows if r["organization_id"] == TENANTS["acme"]
                   and (since is None or r["updated_at"] >= since)
                   and (until is None or r["updated_at"] < until)), key=lambda r: r["id"])


CHECK_EXECUTIONS = """
query ($path: [String!]!, $check: String!) {
  assetCheckExecutions(assetKey: {path: $path}, checkName: $check, limit: 1) {
    runId status
    evaluation { success severity description
                 metadataEntries { label ... on TextMetadataEntry { text } } }
  }
}"""


TEAM = {USER_TAG_PREFIX + "team": "data"}
