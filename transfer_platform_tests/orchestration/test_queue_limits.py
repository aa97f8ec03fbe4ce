"""The run queue's limits, through the real ``TransferRunCoordinator`` and the real queued-run daemon.

The instance is configured from the shipped ``dagster.yaml`` (its ``run_coordinator`` section), with
a launcher that only records launches (``MockedRunLauncher``, Dagster's own test launcher): nothing
executes, so the test itself moves each launched run to STARTED and later to SUCCESS, and a run
holds its slots exactly from its launch to its end. Runs are submitted the ways users submit them:

- ``transfers.enqueue`` (``transfer-platform transfer --enqueue``);
- the UI's launchpad for the ``transfer`` job (run config only, no tags);
- the UI's *Materialize* (the GraphQL mutation the UI sends, with an asset selection);
- the ``integrity`` job for one destination (the launchpad's run config), and the UI's *Execute
  checks* on a destination's assets (a checks-only run of Dagster's asset job).

The queue is driven by ``QueuedRunCoordinatorDaemon.run_iteration`` (private API; Dagster is
pinned in ``uv.lock``). The limits are checked against what each run *really* touches (known to the
test from what it submitted, not read from the tags the coordinator wrote), after every pass and
over the runs' recorded start/end times.

Configuration: sources ``lake`` (max 2 transfers; model ``items``) and ``lake_b`` (max 10; model
``notes``); destinations ``acme_delta`` (max 1, disabled: a manual transfer must still be
accepted), ``globex_delta`` and ``initech_delta`` (max 2 each).
"""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.test_utils import MockedRunLauncher  # pinned Dagster: records launches only
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import WorkspaceFileTarget
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import (  # pinned Dagster
    QueuedRunCoordinatorDaemon,
)
from dagster_graphql.client.query import LAUNCH_PIPELINE_EXECUTION_MUTATION
from dagster_graphql.test.utils import execute_dagster_graphql, infer_job_selector

from transfer_platform.config.loading import load_config
from transfer_platform.orchestration.runs.transfers import TransferFilter, enqueue, list_transfers
from transfer_platform.transfers.order import TransferOrder
from transfer_platform_tests.support.daemon import start_code_server
from transfer_platform_tests.support.platform import REPO, write_config

pytestmark = pytest.mark.integration

DEST_LIMIT = {"acme_delta": 1, "globex_delta": 2, "initech_delta": 2}
RECIPIENT = {"acme_delta": "acme", "globex_delta": "globex", "initech_delta": "initech"}
SOURCE_OF = {"items": "lake", "notes": "lake_b"}
SOURCE_LIMIT = {"lake": 2, "lake_b": 10}
ALL_MODELS = ("items", "notes")
ACTIVE = (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED)


@dataclass(frozen=True)
class Touch:
    """What a run really touches (the ground truth, from what the test submitted)."""

    destination: str
    models: frozenset[str]
    kind: str  # transfer | integrity
    path: str  # how it was submitted, for messages

    @property
    def locked_models(self) -> frozenset[str]:
        # an integrity run reads every model of its destination
        return frozenset(ALL_MODELS) if self.kind == "integrity" else self.models


def write_queue_config(root: Path) -> Path:
    """The fixture's configuration, extended to three destinations and two sources."""
    path = write_config(root, destinations={
        "acme": {"max_concurrent_transfers": 1, "is_enabled": False},
        "globex": {"max_concurrent_transfers": 2},
    })
    config = yaml.safe_load(path.read_text())
    lake = config["sources"][0]
    lake["max_concurrent_transfers"] = SOURCE_LIMIT["lake"]
    config["sources"].append({**lake, "name": "lake_b", "max_concurrent_transfers": SOURCE_LIMIT["lake_b"]})
    for model in config["models"]:
        model["source_name"] = SOURCE_OF[model["model_name"]]
    config["recipients"].append({"name": "initech", "id_in_provider_system": "org-initech"})
    config["destinations"].append({"name": "initech_delta", "recipient": "initech", "vendor": "delta",
                                   "connection": {"path": "dest_initech"}, "max_concurrent_transfers": 2})
    path.write_text(yaml.safe_dump(config))
    return path


def expected_tags(touch: Touch) -> dict[str, str]:
    """The limit tags a run must carry, written out from the tag scheme (not from run_tags.py)."""
    tags = {
        "transfer_platform/destination": touch.destination,
        "transfer_platform/kind": touch.kind,
        f".dagster/transfer_platform/dest_slots_{DEST_LIMIT[touch.destination]}": touch.destination,
    }
    for model in touch.locked_models:
        tags[f".dagster/transfer_platform/model/{model}"] = touch.destination
        tags[f".dagster/transfer_platform/source/{SOURCE_OF[model]}"] = touch.kind
    return tags


def limit_tags_of(run: dg.DagsterRun) -> dict[str, str]:
    limits = ("transfer_platform/destination", "transfer_platform/kind", ".dagster/transfer_platform/dest_slots_",
              ".dagster/transfer_platform/model/", ".dagster/transfer_platform/source/")
    return {k: v for k, v in run.tags.items() if k.startswith(limits)}


def violations(active: list[Touch]) -> list[str]:
    """Every limit that a set of simultaneously running runs breaks."""
    found = []
    for destination, limit in DEST_LIMIT.items():
        here = [t for t in active if t.destination == destination]
        if len(here) > limit:
            found.append(f"{len(here)} runs on {destination} (max {limit}): {[t.path for t in here]}")
        for model in ALL_MODELS:
            holders = [t for t in here if model in t.locked_models]
            if len(holders) > 1:
                found.append(f"{len(holders)} runs hold ({destination}, {model}): {[t.path for t in holders]}")
        if any(t.kind == "integrity" for t in here) and len(here) > 1:
            found.append(f"integrity beside another run on {destination}: {[t.path for t in here]}")
    for source, limit in SOURCE_LIMIT.items():
        readers = [t for t in active if any(SOURCE_OF[m] == source for m in t.locked_models)]
        if len(readers) > limit:
            found.append(f"{len(readers)} runs read {source} (max {limit}): {[t.path for t in readers]}")
    return found


@dataclass
class QueueEnv:
    instance: dg.DagsterInstance
    process_context: WorkspaceProcessContext
    config_path: Path

    def request_context(self):  # -> WorkspaceRequestContext
        return self.process_context.create_request_context()

    def launch(self, job: str, *, run_config: dict | None = None, assets: list[list[str]] | None = None,
               checks: list[list[str]] | None = None, tags: dict[str, str] | None = None) -> dict:
        """The GraphQL mutation the UI sends (launchpad / Materialize); returns its payload."""
        context = self.request_context()
        selector = infer_job_selector(
            context, job,
            asset_selection=None if assets is None else [{"path": p} for p in assets],
            asset_check_selection=None if checks is None else [
                {"assetKey": {"path": p}, "name": "integrity"} for p in checks],
        )
        params = {"selector": selector, "runConfigData": run_config or {},
                  "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]}}
        result = execute_dagster_graphql(context, LAUNCH_PIPELINE_EXECUTION_MUTATION,
                                         {"executionParams": params})
        return result.data["launchPipelineExecution"]

    def launch_ok(self, job: str, **kwargs) -> str:
        payload = self.launch(job, **kwargs)
        assert payload["__typename"] == "LaunchRunSuccess", payload
        return payload["run"]["runId"]

    def enqueue(self, destination: str, models: list[str]) -> str:
        return enqueue(self.instance, load_config(self.config_path), self.config_path,
                       TransferOrder(destination=destination, models=models))

    def dequeue_pass(self) -> None:
        """One pass of the real queued-run daemon; launched runs then report their start."""
        with QueuedRunCoordinatorDaemon(interval_seconds=1) as daemon:
            list(daemon.run_iteration(self.process_context))
        for run in self.instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTING])):
            report(self.instance, run, dg.DagsterEventType.RUN_START)

    def clear_runs(self) -> None:
        for run in self.instance.get_runs():
            self.instance.delete_run(run.run_id)


def report(instance: dg.DagsterInstance, run: dg.DagsterRun, event_type: dg.DagsterEventType) -> None:
    instance.report_dagster_event(dg.DagsterEvent(event_type_value=event_type.value, job_name=run.job_name),
                                  run_id=run.run_id)


@pytest.fixture(scope="module")
def queue_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QueueEnv]:
    root = tmp_path_factory.mktemp("queue")
    config_path = write_queue_config(root)
    home = root / "dagster_home"
    home.mkdir()
    shipped = yaml.safe_load((REPO / "dagster.yaml").read_text())
    assert shipped["run_coordinator"]["class"] == "TransferRunCoordinator"
    overrides = {**shipped, "run_launcher": {"module": MockedRunLauncher.__module__,
                                             "class": MockedRunLauncher.__name__}}
    socket = root / "code_server.sock"
    workspace = root / "workspace.yaml"
    workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": {
        "socket": str(socket), "location_name": "transfer_platform"}}]}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRANSFER_PLATFORM_CONFIG", str(config_path))
        # transfers.enqueue launches through this workspace: one code server for every submission
        patch.setenv("TRANSFER_PLATFORM_WORKSPACE", str(workspace))
        with dg.instance_for_test(overrides=overrides, temp_dir=str(home)) as instance:
            server = start_code_server(socket, dict(os.environ), root / "code_server.log")
            try:
                with WorkspaceProcessContext(instance, WorkspaceFileTarget(paths=[str(workspace)])) as context:
                    yield QueueEnv(instance, context, config_path)
            finally:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def _partition_key() -> str:
    return (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%d")


def test_limits_hold_on_every_launch_path(queue_env: QueueEnv) -> None:
    env = queue_env
    env.clear_runs()
    touches: dict[str, Touch] = {}

    def submitted(run_id: str, destination: str, models: tuple[str, ...], kind: str, path: str) -> None:
        touches[run_id] = Touch(destination, frozenset(models), kind, path)

    transfer_job = "transfer"
    asset_job = "__ASSET_JOB"
    submitted(env.enqueue("acme_delta", []), "acme_delta", ALL_MODELS, "transfer", "cli acme")
    submitted(env.launch_ok(transfer_job, run_config={"ops": {"run_transfer": {"config": {
        "destination": "globex_delta", "models": ["items"]}}}}),
        "globex_delta", ("items",), "transfer", "launchpad globex items")
    submitted(env.launch_ok(asset_job, assets=[["initech", "initech_delta", "items"]], checks=[],
                            tags={"dagster/partition": _partition_key()}),
              "initech_delta", ("items",), "transfer", "materialize initech/items partition")
    submitted(env.launch_ok(asset_job, assets=[["globex", "globex_delta", "items"], ["globex", "globex_delta", "notes"]], checks=[]),
              "globex_delta", ALL_MODELS, "transfer", "materialize globex items+notes")
    submitted(env.enqueue("initech_delta", ["notes"]), "initech_delta", ("notes",), "transfer", "cli initech notes")
    submitted(env.launch_ok("integrity", run_config={"ops": {"run_integrity": {"config": {
        "destination": "globex_delta"}}}}), "globex_delta", ALL_MODELS, "integrity", "integrity globex")
    submitted(env.launch_ok(transfer_job, run_config={"ops": {"run_transfer": {"config": {
        "destination": "acme_delta", "models": ["notes"]}}}}),
        "acme_delta", ("notes",), "transfer", "launchpad acme notes (disabled destination)")
    submitted(env.launch_ok(asset_job, assets=[["acme", "acme_delta", "items"]], checks=[]),
              "acme_delta", ("items",), "transfer", "materialize acme/items")
    submitted(env.launch_ok(transfer_job, run_config={"ops": {"run_transfer": {"config": {
        "destination": "globex_delta", "models": ["notes"]}}}}),
        "globex_delta", ("notes",), "transfer", "launchpad globex notes")
    submitted(env.launch_ok(asset_job, assets=[], checks=[["initech", "initech_delta", "items"],
                                                          ["initech", "initech_delta", "notes"]]),
              "initech_delta", ALL_MODELS, "integrity", "execute checks initech")
    submitted(env.launch_ok(transfer_job, run_config={"ops": {"run_transfer": {"config": {
        "destination": "initech_delta"}}}}),
        "initech_delta", ALL_MODELS, "transfer", "launchpad initech all")
    submitted(env.launch_ok(asset_job, assets=[["globex", "globex_delta", "items"]], checks=[]),
              "globex_delta", ("items",), "transfer", "materialize globex/items")

    instance = env.instance
    # every run is queued and carries exactly the tags of what it touches, whatever the path
    for run_id, touch in touches.items():
        run = instance.get_run_by_id(run_id)
        assert run.status == dg.DagsterRunStatus.QUEUED, (touch.path, run.status)
        assert limit_tags_of(run) == expected_tags(touch), touch.path
        assert set(run.tags["transfer_platform/models"].split(",")) == set(touch.models), touch.path

    peak = {"globex_delta": 0, "lake": 0}
    blocked_seen = 0
    for step in range(40):
        env.dequeue_pass()
        runs = {run_id: instance.get_run_by_id(run_id) for run_id in touches}
        active = [touches[i] for i, r in runs.items() if r.status in ACTIVE]
        queued = [touches[i] for i, r in runs.items() if r.status == dg.DagsterRunStatus.QUEUED]
        assert not violations(active), f"pass {step}: {violations(active)}"
        # a run left in the queue is one that could not start: starting it would break a limit
        for touch in queued:
            assert violations([*active, touch]), f"pass {step}: {touch.path} could start but waits"
        blocked_seen += len(queued)
        peak["globex_delta"] = max(peak["globex_delta"], sum(t.destination == "globex_delta" for t in active))
        peak["lake"] = max(peak["lake"], sum("items" in t.locked_models for t in active))
        if step == 0:
            statuses = {t["id"]: t["status"] for t in list_transfers(instance, TransferFilter())}
            for run_id, run in runs.items():
                if touches[run_id].kind == "transfer":
                    assert statuses[run_id] == ("RUNNING" if run.status in ACTIVE else "PENDING"), touches[run_id].path
        if not active and not queued:
            break
        # the run that started first ends; the next pass may start what it blocked
        first = min((r for r in runs.values() if r.status in ACTIVE),
                    key=lambda r: instance.get_run_record_by_id(r.run_id).start_time)
        report(instance, first, dg.DagsterEventType.RUN_SUCCESS)
    else:
        pytest.fail("the queue did not drain in 40 passes")

    records = {run_id: instance.get_run_record_by_id(run_id) for run_id in touches}
    assert all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in records.values())
    # the limits were reached, not met by chance: runs waited, and ran two at a time where allowed
    assert blocked_seen > 0
    assert peak == {"globex_delta": 2, "lake": 2}
    assert_times_respect_limits({touches[i]: (r.start_time, r.end_time) for i, r in records.items()})


def assert_times_respect_limits(intervals: dict[Touch, tuple[float, float]]) -> None:
    """Over the recorded start/end times: pairwise non-overlap where a limit is 1, and at no moment
    more runs than a limit allows."""
    for (a, (a_start, a_end)), (b, (b_start, b_end)) in itertools.combinations(intervals.items(), 2):
        overlap = a_start < b_end and b_start < a_end
        if a.destination != b.destination or not overlap:
            continue
        assert DEST_LIMIT[a.destination] > 1, f"{a.path} and {b.path} overlap on {a.destination}"
        assert not (a.locked_models & b.locked_models), f"{a.path} and {b.path} overlap on a model"
        assert "integrity" not in (a.kind, b.kind), f"{a.path} and {b.path}: integrity beside a transfer"
    for moment in sorted({start for start, _ in intervals.values()}):
        running = [t for t, (start, end) in intervals.items() if start <= moment < end]
        assert not violations(running), f"at {moment}: {violations(running)}"


def test_run_over_two_destinations_is_refused(queue_env: QueueEnv) -> None:
    """A Materialize over two recipients' assets cannot be described by one destination's limits:
    the coordinator refuses it with the reason instead of letting it run unlimited."""
    env = queue_env
    env.clear_runs()
    payload = env.launch("__ASSET_JOB", assets=[["acme", "acme_delta", "items"], ["globex", "globex_delta", "items"]], checks=[])
    assert payload["__typename"] == "PythonError", payload
    assert "several destinations (acme_delta, globex_delta)" in payload["message"]
    (run,) = env.instance.get_runs()
    assert run.status == dg.DagsterRunStatus.FAILURE
    env.dequeue_pass()
    assert env.instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
    assert run.run_id not in {r.run_id for r in env.instance.run_launcher.queue()}


def test_materialize_with_its_integrity_check_waits_for_other_transfers(queue_env: QueueEnv) -> None:
    env = queue_env
    env.clear_runs()
    env.launch_ok("transfer", run_config={"ops": {"run_transfer": {"config": {
        "destination": "globex_delta", "models": ["notes"]}}}})
    env.dequeue_pass()
    # exactly what LaunchAssetExecutionButton sends: the asset and its checks
    with_check = env.launch_ok("__ASSET_JOB", assets=[["globex", "globex_delta", "items"]], checks=[["globex", "globex_delta", "items"]])
    env.dequeue_pass()
    assert env.instance.get_run_by_id(with_check).status == dg.DagsterRunStatus.QUEUED, (
        "a run executing the integrity check of globex/items started beside a transfer of globex/notes")


def test_an_integrity_run_without_a_destination_is_refused(queue_env: QueueEnv) -> None:
    """The integrity job launched without its run config (the launchpad's default) names the
    missing destination; no run is queued."""
    env = queue_env
    env.clear_runs()
    payload = env.launch("integrity")
    assert payload["__typename"] == "RunConfigValidationInvalid", payload
    assert "destination" in str(payload)
    assert env.instance.get_runs(dg.RunsFilter(job_name="integrity")) == []
