"""Self-healing, end to end on a real Dagster instance: a failed integrity check is repaired by the
``transfer_schedule`` sensor (the windows holding the broken rows transferred again), checked
again, and passes; nothing outside those windows is rewritten; the repairs are bounded per day and
can be turned off.

The destination (lake -> Delta, daily windows over three days) is broken three ways: a row deleted,
a row overwritten by an older version of itself, a value changed under the same last-modified
value. The expectation is the lake's rows. Each run the sensor asks for is executed here, in
process, as the daemon would launch it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
import yaml
from deltalake import DeltaTable

from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration.catalog.checks import (
    CHECK_NAME,
    JOB_NAME,
    integrity_run_config,
)
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.orchestration.scheduling.repair import REPAIR_TAG
from transfer_platform_tests.support.dagster import transfer_run_config
from transfer_platform_tests.support.platform import delivered, lake_rows, write_config

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

ITEMS = dg.AssetKey(["acme", "acme_delta", "items"])
CHECK = dg.AssetCheckKey(ITEMS, CHECK_NAME)


def lake(path: Path) -> dict[int, tuple]:
    """The tenant's lake rows of ``items`` by id: (updated_at, v)."""
    return {r["id"]: (r["updated_at"], r["v"]) for r in lake_rows(path.parent, "items")}


def configure(path: Path, **destination) -> Path:
    raw = yaml.safe_load(path.read_text())
    raw["destinations"][0].update(integrity_check_frequency_minutes=None, **destination)
    path.write_text(yaml.safe_dump(raw))
    return path


def tick(defs: dg.Definitions, path: Path, instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorResult:
    sensor = defs.resolve_sensor_def("transfer_schedule")
    context = dg.build_sensor_context(instance=instance, cursor=cursor,
                                      resources={"platform": TransferPlatformResource(config_path=str(path))})
    return sensor(context)


def repair_requests(result: dg.SensorResult) -> list[dg.RunRequest]:
    return [r for r in result.run_requests or [] if REPAIR_TAG in r.tags]


def launch(defs: dg.Definitions, instance: dg.DagsterInstance, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
    """Run a request the way the daemon would (its job, config and tags)."""
    job = defs.resolve_job_def(request.job_name)
    return job.execute_in_process(run_config=request.run_config or {}, tags=request.tags, instance=instance,
                                  raise_on_error=False)


def check(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.AssetCheckEvaluation:
    result = defs.resolve_job_def(JOB_NAME).execute_in_process(
        run_config=integrity_run_config("acme_delta", ["items"]), instance=instance, raise_on_error=False)
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation


def break_destination(path: Path) -> dict[str, int]:
    """One row deleted (day 0), one older version (day 0), one value changed (day 1): day 2 intact."""
    table = DeltaTable(str(path.parent / "dest_acme" / "items"))
    by_day: dict[str, list[int]] = {}
    for key, (moment, _) in sorted(lake(path).items()):
        by_day.setdefault(moment.date().isoformat(), []).append(key)
    days = sorted(by_day)
    missing, stale, changed = by_day[days[0]][0], by_day[days[0]][1], by_day[days[1]][0]
    table.delete(f"id = {missing}")
    table.update({"updated_at": "updated_at - INTERVAL '1 hour'", "v": "'an older version'"},
                 predicate=f"id = {stale}")
    table.update({"v": "'changed under the same last-modified value'"}, predicate=f"id = {changed}")
    return {"missing": missing, "stale": stale, "changed": changed, "days": days}


def test_a_failed_check_is_repaired_window_by_window_then_passes(tmp_path: Path, spark) -> None:
    path = configure(write_config(tmp_path))
    defs = build_definitions(str(path))
    with dg.instance_for_test() as instance:
        assert defs.resolve_job_def("transfer").execute_in_process(
            run_config=transfer_run_config("acme_delta"), instance=instance).success
        broken = break_destination(path)
        failed = check(defs, instance)
        assert not failed.passed
        values = {k: v.value for k, v in failed.metadata.items()}
        assert (values["missing"], values["stale"], values["incorrect"]) == (1, 1, 1)
        # the two broken days, touching: one range
        assert values["repair_windows"] == [[f"{broken['days'][0]}T00:00:00.000000+00:00",
                                             f"{broken['days'][2]}T00:00:00.000000+00:00"]]

        first = tick(defs, path, instance, None)
        repairs = repair_requests(first)
        assert [r.job_name for r in repairs] == ["transfer"]
        config = repairs[0].run_config["ops"]["run_transfer"]["config"]
        assert config["models"] == ["items"]
        run = launch(defs, instance, repairs[0])
        assert run.success
        materialized = [e.step_materialization_data.materialization for e in run.get_asset_materialization_events()]
        moved = {m.partition: m.metadata["rows_transferred"].value for m in materialized}
        per_day = {day: sum(1 for m, _ in lake(path).values() if m.date().isoformat() == day)
                   for day in broken["days"]}
        assert moved == {day: per_day[day] for day in broken["days"][:2]}  # day 2 and today untouched

        second = tick(defs, path, instance, first.cursor)
        (recheck,) = repair_requests(second)
        assert recheck.job_name == JOB_NAME
        assert recheck.run_config == integrity_run_config("acme_delta", ["items"])  # this check alone
        assert launch(defs, instance, recheck).success
        assert delivered(path.parent, "acme", "items") == lake_rows(path.parent, "items")

        history = instance.event_log_storage.get_asset_check_execution_history(CHECK, limit=5)
        assert [r.status.value for r in history] == ["SUCCEEDED", "FAILED"]  # newest first
        assert run.dagster_run.tags[REPAIR_TAG] == history[1].run_id  # names the check that caused it
        assert instance.get_run_by_id(history[0].run_id).tags[REPAIR_TAG] == history[1].run_id
        assert repair_requests(tick(defs, path, instance, second.cursor)) == []


def test_repairs_are_bounded_per_day_and_can_be_turned_off(tmp_path: Path, spark) -> None:
    path = configure(write_config(tmp_path), max_repairs_per_day=1)
    defs = build_definitions(str(path))
    with dg.instance_for_test() as instance:
        assert defs.resolve_job_def("transfer").execute_in_process(
            run_config=transfer_run_config("acme_delta"), instance=instance).success
        break_destination(path)
        assert not check(defs, instance).passed
        first = tick(defs, path, instance, None)
        assert len(repair_requests(first)) == 1
        # the repair did not run; a newer failed check: the day's one cycle is used up
        assert not check(defs, instance).passed
        assert repair_requests(tick(defs, path, instance, first.cursor)) == []
        today = datetime.now(UTC).date().isoformat()
        assert json.loads(first.cursor)["repairs:acme_delta:items"] == f"{today}/1"

        off = configure(path, self_healing=False)
        assert repair_requests(tick(build_definitions(str(off)), off, instance, None)) == []
