"""Upkeep runs the sensor enqueues beside transfers: each model's delete sweep on its
``delete_sweep_frequency_minutes``, each destination's integrity checks on its
``integrity_check_frequency_minutes`` once its first transfer has succeeded; and the
``delete_sweep`` job itself, run in process on a real Dagster instance (lake -> Delta).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable

from transfer_platform.config.loading import load_config
from transfer_platform.core.timeutil import isoformat
from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration.catalog.checks import integrity_run_config
from transfer_platform.orchestration.scheduling.coordinator import tags_for
from transfer_platform.orchestration.scheduling.run_tags import KIND_TAG, limit_tags, model_key
from transfer_platform.orchestration.scheduling.sensors import upkeep_requests
from transfer_platform_tests.support.dagster import transfer_run_config
from transfer_platform_tests.support.platform import TENANTS, write_config

pytestmark = [pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]


def with_upkeep(path: Path, *, integrity: int | None = 1440) -> Path:
    raw = yaml.safe_load(path.read_text())
    raw["models"][0].update(delete_detection="sweep", delete_sweep_frequency_minutes=60)  # items
    for destination in raw["destinations"]:
        destination["integrity_check_frequency_minutes"] = integrity
    path.write_text(yaml.safe_dump(raw))
    return path


def at(hour: int, minute: int) -> datetime:
    return datetime(2025, 5, 6, hour, minute, tzinfo=UTC)


def test_sweeps_are_due_on_their_frequency_and_checks_wait_for_the_first_success(tmp_path: Path) -> None:
    config = load_config(with_upkeep(write_config(tmp_path)))
    requests, cursor = upkeep_requests(config, {}, at(10, 7), lambda destination: False)
    (sweep,) = requests  # items only; no check before a transfer has succeeded
    assert sweep.job_name == "delete_sweep"
    assert sweep.run_key == f"sweep:acme_delta:items@{isoformat(at(10, 0))}"
    assert sweep.run_config == {"ops": {"sweep_deletes": {"config": {"destination": "acme_delta",
                                                                     "models": ["items"]}}}}
    assert limit_tags(config, "acme_delta", [config.model("items")], "delete_sweep").items() <= sweep.tags.items()
    assert sweep.tags[model_key("items")] == "acme_delta"  # the queue keeps it from the model's transfers
    assert cursor == {"sweep:acme_delta:items": isoformat(at(10, 0))}

    again, same = upkeep_requests(config, cursor, at(10, 59), lambda destination: True)
    (check,) = again  # the sweep's hour is done; the check, now delivered, is due
    assert check.job_name == "integrity"
    assert check.run_config == integrity_run_config("acme_delta")  # every model the destination receives
    assert check.tags[KIND_TAG] == "integrity"
    assert same == {**cursor, "integrity:acme_delta": isoformat(at(0, 0))}
    later, _ = upkeep_requests(config, same, at(11, 0), lambda destination: True)
    assert [r.run_key for r in later] == [f"sweep:acme_delta:items@{isoformat(at(11, 0))}"]


def test_checks_can_be_turned_off(tmp_path: Path) -> None:
    config = load_config(with_upkeep(write_config(tmp_path), integrity=None))
    requests, _ = upkeep_requests(config, {}, at(10, 7), lambda destination: True)
    assert [r.job_name for r in requests] == ["delete_sweep"]


def test_a_delete_sweep_launched_by_hand_is_placed_under_the_models_limits(tmp_path: Path) -> None:
    config = load_config(with_upkeep(write_config(tmp_path)))
    run = dg.DagsterRun(job_name="delete_sweep", run_config={
        "ops": {"sweep_deletes": {"config": {"destination": "acme_delta"}}}})
    assert tags_for(config, run) == limit_tags(config, "acme_delta", [config.model("items")], "delete_sweep")


@pytest.mark.integration
def test_the_delete_sweep_job_removes_rows_gone_from_the_lake(tmp_path: Path, spark) -> None:
    path = with_upkeep(write_config(tmp_path))
    defs = build_definitions(str(path))
    lake_file = tmp_path / "lake" / "items" / "part-0.parquet"
    with dg.instance_for_test() as instance:
        moved = defs.resolve_job_def("transfer").execute_in_process(
            run_config=transfer_run_config("acme_delta"), instance=instance)
        assert moved.success
        rows = pq.read_table(lake_file).to_pylist()
        acme = sorted(r["id"] for r in rows if r["organization_id"] == TENANTS["acme"])
        oldest = acme[:2]  # well before the lookback of the last delivered row
        table = pq.read_table(lake_file)
        pq.write_table(table.filter(pc.invert(pc.is_in(table.column("id"), pa.array(oldest)))), lake_file)

        swept = defs.resolve_job_def("delete_sweep").execute_in_process(
            run_config={"ops": {"sweep_deletes": {"config": {"destination": "acme_delta"}}}}, instance=instance)
        assert swept.success
        (output,) = [e for e in swept.all_events if e.event_type == dg.DagsterEventType.STEP_OUTPUT]
        metadata = output.step_output_data.metadata
        assert metadata["rows_deleted"].value == 2
        run = instance.get_run_by_id(swept.run_id)
        assert run.tags[KIND_TAG] == "delete_sweep"
        assert run.tags[model_key("items")] == "acme_delta"
    delivered = sorted(DeltaTable(str(tmp_path / "dest_acme" / "items")).to_pyarrow_table(columns=["id"])
                       .column("id").to_pylist())
    assert delivered == [k for k in acme if k not in oldest]
