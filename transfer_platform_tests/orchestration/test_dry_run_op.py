"""``dry_run: true`` in the launchpad's run config: of the transfer assets' op
(``ops: {transfer__<destination>: {config: {dry_run: true}}}``) and of the ``transfer`` job.

Real Dagster (``instance_for_test``, in process), real Spark, a Parquet lake and a Delta
destination on disk: the run succeeds, logs and attaches the plan, records no materialization and
leaves the destination's folder as it was (absent, or every file the same).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from transfer_platform.definitions import build_definitions
from transfer_platform_tests.support.dagster import transfer_run_config
from transfer_platform_tests.support.files import tree
from transfer_platform_tests.support.platform import write_config

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

ITEMS = dg.AssetKey(["acme", "acme_delta", "items"])
NOTES = dg.AssetKey(["acme", "acme_delta", "notes"])
DRY_RUN = {"ops": {"transfer__acme_delta": {"config": {"dry_run": True}}}}


def materializations(instance: dg.DagsterInstance, key: dg.AssetKey) -> int:
    return len(instance.fetch_materializations(key, limit=1000).records)


def test_asset_dry_run_from_the_launchpad_records_no_materialization(tmp_path: Path, spark) -> None:
    path = write_config(tmp_path)  # items and notes: 12 acme rows each over the last 3 days
    defs = build_definitions(str(path))
    keys = defs.resolve_asset_graph().get(ITEMS).partitions_def.get_partition_keys()
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(
            instance=instance, asset_selection=[ITEMS, NOTES], run_config=DRY_RUN,
            tags={"dagster/asset_partition_range_start": keys[0],
                  "dagster/asset_partition_range_end": keys[-1]})

        assert result.success
        assert result.asset_materializations_for_node("transfer__acme_delta") == []
        assert materializations(instance, ITEMS) == materializations(instance, NOTES) == 0
        observations = result.asset_observations_for_node("transfer__acme_delta")
        assert {o.asset_key for o in observations} == {ITEMS, NOTES}
        for observation in observations:
            plan = observation.metadata["plan"].value
            assert (plan["kind"], plan["window_count"], plan["rows"]) == ("incremental", len(keys), 12)
            assert [w["partition"] for w in plan["windows"]] == keys
            assert observation.metadata["dry_run"].value is True
        logged = [e.message for e in instance.all_logs(result.run_id) if "dry run: model" in (e.message or "")]
        assert len(logged) == 2
    assert not (tmp_path / "dest_acme").exists()


def test_transfer_job_dry_run_after_a_transfer_moves_nothing(tmp_path: Path, spark) -> None:
    path = write_config(tmp_path)
    job = build_definitions(str(path)).resolve_job_def("transfer")
    with dg.instance_for_test() as instance:
        moved = job.execute_in_process(run_config=transfer_run_config("acme_delta"), instance=instance)
        assert moved.success
        counted = materializations(instance, ITEMS), materializations(instance, NOTES)
        assert counted[0] > 0
        before = tree(tmp_path / "dest_acme")

        result = job.execute_in_process(run_config=transfer_run_config("acme_delta", models=["items"],
                                                                       dry_run=True), instance=instance)

        assert result.success
        assert (materializations(instance, ITEMS), materializations(instance, NOTES)) == counted
        assert tree(tmp_path / "dest_acme") == before
        (output,) = [e for e in result.all_node_events if e.event_type_value == "STEP_OUTPUT"]
        plan = output.event_specific_data.metadata["plan"].value
        assert (plan["dry_run"], plan["destination"]) == (True, "acme_delta")
        (model,) = plan["models"]
        assert (model["model"], model["kind"]) == ("items", "incremental")
        assert model["watermark"] is not None
        assert model["window_count"] == 1
