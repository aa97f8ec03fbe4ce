"""The run coordinator: placement, tags on every launch path, the queue's rules, the queue itself.

A real Dagster instance whose ``dagster.yaml`` is the shipped one (``TransferRunCoordinator``), a
code location loaded in process from ``transfer_platform.definitions`` (the configuration comes
from ``$TRANSFER_PLATFORM_CONFIG``, as for the webserver and daemon), runs created and submitted
as ``dagster job launch`` and the UI's launch do it, and one pass of the real run-queue daemon.
Private Dagster APIs (pinned 1.13): ``in_process`` workspace, ``JobSubsetSelector``,
``QueuedRunCoordinatorDaemon.run_iteration`` and the ``MockedRunLauncher`` test launcher (a
launched run stays STARTING, so no run really executes).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

from transfer_platform.config.loading import load_config
from transfer_platform.orchestration.catalog.checks import (
    CHECK_NAME,
    integrity_check_keys,
    integrity_run_config,
)
from transfer_platform.orchestration.scheduling.coordinator import (
    RunPlacementError,
    TransferRunCoordinator,
    placement,
    tags_for,
)
from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    KIND_TAG,
    MODELS_TAG,
    limit_tags,
    queue_rules,
)
from transfer_platform_tests.support.dagster import (
    CONFIG_ENV,
    MOCKED_LAUNCHER,
    create,
    launch,
    queued_home,
    transfer_run_config,
    workspace,
)
from transfer_platform_tests.support.platform import dagster_home, write_config

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

ACME_ITEMS = dg.AssetKey(["acme", "acme_delta", "items"])
ACME_NOTES = dg.AssetKey(["acme", "acme_delta", "notes"])
GLOBEX_ITEMS = dg.AssetKey(["globex", "globex_delta", "items"])


# -- fixtures ---------------------------------------------------------------------------------------

@pytest.fixture
def config_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """acme_delta: 1 transfer at once, every model; globex_delta: 3 at once, items only."""
    path = write_config(tmp_path, destinations={
        "acme": {"max_concurrent_transfers": 1},
        "globex": {"max_concurrent_transfers": 3, "enabled_models": ["items"]},
    }, source_limit=10)
    monkeypatch.setenv(CONFIG_ENV, str(path))
    return path


@pytest.fixture
def queued(config_path: Path, tmp_path: Path) -> Iterator[tuple[dg.DagsterInstance, WorkspaceProcessContext]]:
    home = queued_home(tmp_path, run_launcher=MOCKED_LAUNCHER)
    with dg.DagsterInstance.from_config(str(home)) as instance, workspace(instance) as context:
        yield instance, context


# -- placement: which destination, models and kind a run touches (no instance) ----------------------

def test_placement_of_a_transfer_job_run_comes_from_its_run_config(config_path: Path) -> None:
    config = load_config(config_path)
    run = dg.DagsterRun(job_name="transfer", run_config=transfer_run_config("acme_delta", models=["notes"]))
    assert placement(config, run) == ("acme_delta", ["notes"], "transfer")
    every = dg.DagsterRun(job_name="transfer", run_config=transfer_run_config("acme_delta"))
    assert placement(config, every) == ("acme_delta", [], "transfer")
    assert tags_for(config, every) == limit_tags(config, "acme_delta", config.models, "transfer")
    with pytest.raises(RunPlacementError, match=r"needs ops\.run_transfer\.config\.destination"):
        placement(config, dg.DagsterRun(job_name="transfer", run_config={}))


def test_placement_of_an_asset_run_is_its_destination_and_models(config_path: Path) -> None:
    config = load_config(config_path)
    run = dg.DagsterRun(job_name="__ASSET_JOB", asset_selection=frozenset(
        {ACME_NOTES, dg.AssetKey(["source", "lake", "items"])}))  # a source spec is no model
    assert placement(config, run) == ("acme_delta", ["notes"], "transfer")
    assert tags_for(config, run) == limit_tags(config, "acme_delta", [config.model("notes")], "transfer")


def test_an_asset_check_run_is_integrity_and_locks_every_model_of_its_destination(config_path: Path) -> None:
    config = load_config(config_path)
    run = dg.DagsterRun(job_name="__ASSET_JOB", asset_check_selection=frozenset(  # `Execute checks`
        {dg.AssetCheckKey(ACME_ITEMS, CHECK_NAME)}))
    assert placement(config, run) == ("acme_delta", ["items"], "integrity")
    tags = tags_for(config, run)
    assert tags[KIND_TAG] == "integrity"
    assert tags[".dagster/transfer_platform/model/items"] == "acme_delta"
    assert tags[".dagster/transfer_platform/model/notes"] == "acme_delta"  # not checked, still locked


def test_an_integrity_job_run_is_placed_by_its_run_config(config_path: Path) -> None:
    config = load_config(config_path)
    run = dg.DagsterRun(job_name="integrity", run_config=integrity_run_config("acme_delta", ["items"]))
    assert placement(config, run) == ("acme_delta", ["items"], "integrity")
    tags = tags_for(config, run)
    assert tags[".dagster/transfer_platform/model/notes"] == "acme_delta"  # an integrity run locks them all
    whole = dg.DagsterRun(job_name="integrity", run_config=integrity_run_config("globex_delta"))
    assert placement(config, whole) == ("globex_delta", [], "integrity")
    with pytest.raises(RunPlacementError, match=r"an integrity run needs ops\.run_integrity\.config\.destination"):
        placement(config, dg.DagsterRun(job_name="integrity", run_config={}))


def test_a_run_spanning_two_destinations_is_refused_with_the_reason(config_path: Path) -> None:
    config = load_config(config_path)
    run = dg.DagsterRun(job_name="__ASSET_JOB", asset_selection=frozenset({ACME_ITEMS, GLOBEX_ITEMS}))
    with pytest.raises(RunPlacementError, match=r"several destinations \(acme_delta, globex_delta\)"
                                                r".*one destination's assets per run"):
        placement(config, run)


def test_a_model_the_destination_does_not_receive_is_refused(config_path: Path) -> None:
    config = load_config(config_path)
    run = dg.DagsterRun(job_name="transfer", run_config=transfer_run_config("globex_delta", models=["notes"]))
    with pytest.raises(RunPlacementError, match=r"'globex_delta' does not receive model\(s\) \['notes'\]"):
        tags_for(config, run)
    with pytest.raises(Exception, match="unknown destination 'nowhere'"):
        tags_for(config, dg.DagsterRun(job_name="transfer", run_config=transfer_run_config("nowhere")))


def test_runs_that_already_carry_their_placement_and_runs_of_other_jobs(config_path: Path) -> None:
    config = load_config(config_path)
    sensor_run = dg.DagsterRun(job_name="transfer", run_config=transfer_run_config("acme_delta"),
                               tags={DESTINATION_TAG: "globex_delta", KIND_TAG: "transfer",
                                     MODELS_TAG: "items"})
    assert placement(config, sensor_run) == ("globex_delta", ["items"], "transfer")
    other = dg.DagsterRun(job_name="reporting", asset_selection=frozenset({dg.AssetKey(["report"])}))
    assert placement(config, other) is None
    assert tags_for(config, other) == {}


# -- every launch path through the instance's coordinator --------------------------------------------

def test_every_launch_path_is_queued_with_its_limit_tags(queued, config_path: Path) -> None:
    instance, context = queued
    config = load_config(config_path)
    job_run = launch(instance, context, "transfer",
                     run_config=transfer_run_config("acme_delta", models=["items"]))
    asset_run = launch(instance, context, "__ASSET_JOB", asset_selection={GLOBEX_ITEMS})
    check_run = launch(instance, context, "__ASSET_JOB",  # `Execute checks`
                       asset_check_selection=set(integrity_check_keys(config, "acme_delta")))
    integrity_run = launch(instance, context, "integrity", run_config=integrity_run_config("globex_delta"))
    expected = {
        job_run.run_id: limit_tags(config, "acme_delta", [config.model("items")], "transfer"),
        asset_run.run_id: limit_tags(config, "globex_delta", [config.model("items")], "transfer"),
        check_run.run_id: limit_tags(config, "acme_delta", [config.model("items"), config.model("notes")],
                                     "integrity"),
        integrity_run.run_id: limit_tags(config, "globex_delta", [config.model("items")], "integrity"),
    }
    for run_id, tags in expected.items():
        stored = instance.get_run_by_id(run_id)
        assert stored.status == dg.DagsterRunStatus.QUEUED
        assert {k: stored.tags.get(k) for k in tags if k != MODELS_TAG} == {
            k: v for k, v in tags.items() if k != MODELS_TAG}
        assert sorted(stored.tags[MODELS_TAG].split(",")) == sorted(tags[MODELS_TAG].split(","))


def test_a_run_the_limits_cannot_describe_is_refused_at_submission(queued) -> None:
    instance, context = queued
    with pytest.raises(RunPlacementError, match="several destinations"):
        launch(instance, context, "__ASSET_JOB", asset_selection={ACME_ITEMS, GLOBEX_ITEMS})
    (refused,) = instance.get_runs()
    assert refused.status == dg.DagsterRunStatus.FAILURE
    messages = [e.dagster_event.message or "" for e in instance.all_logs(refused.run_id) if e.dagster_event]
    assert any("cannot place run" in m and "acme_delta, globex_delta" in m for m in messages)


def test_a_configuration_that_does_not_load_fails_closed(queued, config_path: Path) -> None:
    instance, context = queued
    run = create(instance, context, "transfer", run_config=transfer_run_config("acme_delta"))
    config_path.write_text("sources: [oops")  # the code server loaded the file before; we did not
    with pytest.raises(RunPlacementError, match="not valid YAML"):
        instance.submit_run(run.run_id, context.create_request_context())
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
    with pytest.raises(Exception, match="not valid YAML"):
        instance.run_coordinator.get_run_queue_config()


def test_an_integrity_run_without_a_destination_is_not_queued(queued) -> None:
    instance, context = queued
    with pytest.raises(Exception, match="destination"):  # the job's config requires it
        launch(instance, context, "integrity")
    assert all(run.status != dg.DagsterRunStatus.QUEUED for run in instance.get_runs())


# -- the queue's rules and one pass of the run-queue daemon ------------------------------------------

def test_queue_config_is_the_base_rules_plus_the_generated_ones(config_path: Path, tmp_path: Path) -> None:
    base_rule = {"key": "team", "limit": 2}
    home = queued_home(tmp_path, run_coordinator_config={"tag_concurrency_limits": [base_rule]})
    with dg.DagsterInstance.from_config(str(home)) as instance:
        coordinator = instance.run_coordinator
        assert isinstance(coordinator, TransferRunCoordinator)
        generated = queue_rules(load_config(config_path))
        queue = coordinator.get_run_queue_config()
        assert queue.tag_concurrency_limits == [base_rule, *generated]
        assert queue.max_concurrent_runs == 8  # the rest of dagster.yaml is kept
        # what the daemon reads
        assert instance.get_concurrency_config().run_queue_config.tag_concurrency_limits == [
            base_rule, *generated]

        # the rules follow the file without a restart
        raw = yaml.safe_load(config_path.read_text())
        raw["destinations"][0]["max_concurrent_transfers"] = 5
        config_path.write_text(yaml.safe_dump(raw))
        stat = config_path.stat()
        os.utime(config_path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        keys = [r["key"] for r in coordinator.get_run_queue_config().tag_concurrency_limits]
        assert ".dagster/transfer_platform/dest_slots_5" in keys
        assert ".dagster/transfer_platform/dest_slots_1" not in keys


def test_the_run_queue_starts_only_what_the_limits_allow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """acme (1 slot): its second transfer and its integrity run wait; globex (3 slots): two
    transfers of different models start together, a third on a model already running waits."""
    path = write_config(tmp_path, destinations={
        "acme": {"max_concurrent_transfers": 1}, "globex": {"max_concurrent_transfers": 3}})
    monkeypatch.setenv(CONFIG_ENV, str(path))
    home = queued_home(tmp_path, run_launcher=MOCKED_LAUNCHER)
    with dg.DagsterInstance.from_config(str(home)) as instance, workspace(instance) as context:
        acme_items = launch(instance, context, "transfer", run_config=transfer_run_config("acme_delta", models=["items"]))
        acme_notes = launch(instance, context, "transfer", run_config=transfer_run_config("acme_delta", models=["notes"]))
        acme_check = launch(instance, context, "integrity", run_config=integrity_run_config("acme_delta"))
        globex_items = launch(instance, context, "__ASSET_JOB", asset_selection={GLOBEX_ITEMS})
        globex_notes = launch(instance, context, "transfer",
                              run_config=transfer_run_config("globex_delta", models=["notes"]))
        globex_again = launch(instance, context, "transfer",
                              run_config=transfer_run_config("globex_delta", models=["items"]))

        daemon = QueuedRunCoordinatorDaemon(interval_seconds=1)
        list(daemon.run_iteration(context))

        def status(run: dg.DagsterRun) -> dg.DagsterRunStatus:
            return instance.get_run_by_id(run.run_id).status

        started = dg.DagsterRunStatus.STARTING  # launched by the mocked launcher
        assert status(acme_items) == started
        assert status(globex_items) == started
        assert status(globex_notes) == started
        assert status(acme_notes) == dg.DagsterRunStatus.QUEUED  # acme's only slot is taken
        assert status(acme_check) == dg.DagsterRunStatus.QUEUED  # no integrity beside a transfer
        assert status(globex_again) == dg.DagsterRunStatus.QUEUED  # globex/items already runs


def test_the_dequeue_interval_takes_fractions_and_reaches_the_daemon(tmp_path: Path, monkeypatch) -> None:
    from dagster._daemon.controller import create_daemon_of_type

    monkeypatch.setenv(CONFIG_ENV, str(write_config(tmp_path)))

    shipped = yaml.safe_load((dagster_home(tmp_path) / "dagster.yaml").read_text())
    interval = shipped["run_coordinator"]["config"]["dequeue_interval_seconds"]
    assert interval == 0.5  # Dagster's own schema takes whole seconds only
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        assert instance.run_coordinator.configured_dequeue_interval_seconds == interval
        daemon = create_daemon_of_type(QueuedRunCoordinatorDaemon.daemon_type(), instance)
        # the daemon's own loop (which waits in half-second steps) does not wait: its pass does,
        # the interval exactly (SQLite here: no PostgreSQL notification wakes it earlier)
        assert daemon.interval_seconds == 0
        assert getattr(type(daemon).run_iteration, "transfer_platform_prompt_pass", False)
        with workspace(instance) as context:
            passes = []
            for _ in range(3):
                for _result in daemon.run_iteration(context):
                    pass
                passes.append(time.monotonic())
        gaps = [b - a for a, b in zip(passes, passes[1:], strict=False)]
        # never back to back: it waits its interval (from the start of the previous pass)
        assert all(gap >= interval - 0.05 for gap in gaps), gaps
    for bad in (0, -1):
        shipped["run_coordinator"]["config"]["dequeue_interval_seconds"] = bad
        (tmp_path / "dagster_home" / "dagster.yaml").write_text(yaml.safe_dump(shipped))
        with pytest.raises(ValueError, match="dequeue_interval_seconds must be > 0"):
            dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")).run_coordinator  # noqa: B018
