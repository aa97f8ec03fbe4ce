"""The ``integrity`` asset checks and job against a real Dagster instance, real Spark and Delta.

Two recipients read the same Parquet lake: ``acme`` into a Delta table, ``globex`` into a
PostgreSQL destination that cannot be reached (port 1) and whose password comes from a variable.
The integrity job is launched per destination, as a user would, with its run config; the UI's
`Execute checks` on an asset (a checks-only subset of Dagster's asset job) reports on the same check.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable

from transfer_platform.config.loading import load_config
from transfer_platform.definitions import build_definitions
from transfer_platform.errors import ConnectionFailure
from transfer_platform.orchestration.catalog.checks import (
    CHECK_NAME,
    INTEGRITY_OP,
    JOB_NAME,
    error_result,
    integrity_check_keys,
    integrity_run_config,
)
from transfer_platform.orchestration.scheduling.run_tags import KIND_TAG
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

DAY0 = datetime(2025, 3, 3, tzinfo=UTC)
TS = pa.timestamp("us", tz="UTC")
PASSWORD_VAR = "TP_TEST_INTEGRITY_PASSWORD"
PASSWORD = "s3cret-Integrity-pw"
ACME_KEY = dg.AssetKey(["acme", "acme_delta", "items"])
GLOBEX_KEY = dg.AssetKey(["globex", "globex_pg", "items"])


def _write_lake(root: Path, rows: list[dict]) -> None:
    folder = root / "items"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.parquet"):
        old.unlink()
    schema = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", TS),
                        ("v", pa.string())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / "part-0.parquet")


def _rows() -> list[dict]:
    return [{"id": k, "organization_id": "org-'a'" if k % 2 else "org-b",
             "updated_at": DAY0 + timedelta(hours=k, microseconds=k), "v": f"r{k}"} for k in range(1, 13)]


@pytest.fixture
def config_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(PASSWORD_VAR, PASSWORD)
    _write_lake(tmp_path / "lake", _rows())
    columns = [
        {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
        {"name_in_source": "organization_id", "data_type": "string"},
        {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
        {"name_in_source": "v", "data_type": "string"},
    ]
    unreachable = {**pg_connection_config("nowhere"), "port": 1, "password": f"${{{PASSWORD_VAR}}}"}
    config = {
        "sources": [{"name": "lake", "vendor": "parquet", "connection": {"path": "lake"},
                     "lookback_window": 0}],
        "models": [{"model_name": "items", "source_name": "lake", "source_table": "items",
                    "organization_column": "organization_id", "columns": columns,
                    "min_start_time_epoch": int(DAY0.timestamp())}],
        "recipients": [{"name": "acme", "id_in_provider_system": "org-'a'"},
                       {"name": "globex", "id_in_provider_system": "org-b"}],
        "destinations": [
            {"name": "acme_delta", "recipient": "acme", "vendor": "delta", "connection": {"path": "dest"}},
            {"name": "globex_pg", "recipient": "globex", "vendor": "postgres", "connection": unreachable},
        ],
        "spark": {"master": "local[2]", "driver_memory": "1g"},
    }
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run_checks(defs: dg.Definitions, instance: dg.DagsterInstance, destination: str,
                models: tuple[str, ...] = ()) -> dg.ExecuteInProcessResult:
    """The ``integrity`` job for one destination, as the sensor, the API and a launchpad run it."""
    return defs.resolve_job_def(JOB_NAME).execute_in_process(
        run_config=integrity_run_config(destination, models), instance=instance, raise_on_error=False)


def _execute_checks(defs: dg.Definitions, instance: dg.DagsterInstance,
                    checks: list[dg.AssetCheckKey]) -> dg.ExecuteInProcessResult:
    """The UI's `Execute checks` on assets: a checks-only subset of Dagster's asset job."""
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_check_selection=set(checks))
    return job.execute_in_process(instance=instance, raise_on_error=False)


def _values(evaluation) -> dict:  # AssetCheckEvaluation
    return {k: v.value for k, v in evaluation.metadata.items()}


def test_one_non_blocking_check_per_asset_and_an_integrity_op_job(config_path: Path) -> None:
    defs = build_definitions(str(config_path))
    job = defs.resolve_job_def(JOB_NAME)
    assert job.tags[KIND_TAG] == "integrity"
    assert [node.name for node in job.nodes] == [INTEGRITY_OP]  # an op job: no transfer op resolved again
    assert job.asset_layer.executable_asset_keys == set()  # the job materializes nothing
    check_keys = defs.resolve_asset_graph().asset_check_keys
    integrity = {key for key in check_keys if key.name == CHECK_NAME}
    assert integrity == {dg.AssetCheckKey(ACME_KEY, CHECK_NAME), dg.AssetCheckKey(GLOBEX_KEY, CHECK_NAME)}
    for key in integrity:
        spec = defs.resolve_asset_graph().get_check_spec(key)
        assert spec.blocking is False
    config = load_config(config_path)
    assert integrity_check_keys(config, "acme_delta") == [dg.AssetCheckKey(ACME_KEY, CHECK_NAME)]


def test_integrity_job_passes_then_fails_with_the_counts_and_the_fix(config_path: Path, spark) -> None:
    config = load_config(config_path)
    assert transfer(spark, config, datetime.now(UTC), destination="acme_delta").status == "SUCCESS"
    defs = build_definitions(str(config_path))
    acme_checks = integrity_check_keys(config, "acme_delta")
    with dg.instance_for_test() as instance:
        clean = _run_checks(defs, instance, "acme_delta")
        assert clean.success
        (evaluation,) = clean.get_asset_check_evaluations()
        assert (evaluation.asset_key, evaluation.check_name) == (ACME_KEY, CHECK_NAME)
        assert evaluation.passed
        values = _values(evaluation)
        assert {k: values[k] for k in ("rows_compared", "missing", "stale", "incorrect", "orphaned",
                                       "pending")} == {"rows_compared": 6, "missing": 0, "stale": 0,
                                                       "incorrect": 0, "orphaned": 0, "pending": 0}
        assert values["examples"] == {}
        assert instance.get_run_by_id(clean.run_id).tags[KIND_TAG] == "integrity"

        DeltaTable(str(config_path.parent / "dest" / "items")).delete("id = 3")
        tampered = _execute_checks(defs, instance, acme_checks)  # the UI's way, on the same check
        assert tampered.success  # a failed check does not fail the run (not blocking)
        (evaluation,) = tampered.get_asset_check_evaluations()
        assert not evaluation.passed
        assert evaluation.severity == dg.AssetCheckSeverity.ERROR
        values = _values(evaluation)
        assert (values["rows_compared"], values["missing"], values["pending"]) == (6, 1, 0)
        assert values["examples"] == {"missing": ["id=3"]}
        assert "raise lookback_window" in evaluation.description
        assert "transfer-platform transfer acme_delta --model items --full-refresh" in evaluation.description
        history = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(ACME_KEY, CHECK_NAME), limit=5)
        assert len(history) == 2


def test_unreachable_destination_is_a_failed_check_without_secrets(config_path: Path, spark) -> None:
    defs = build_definitions(str(config_path))
    with dg.instance_for_test() as instance:
        result = _run_checks(defs, instance, "globex_pg")
        assert result.success
        (evaluation,) = result.get_asset_check_evaluations()
        assert evaluation.asset_key == GLOBEX_KEY
        assert not evaluation.passed
        assert "cannot reach PostgreSQL destination 'globex_pg' at 127.0.0.1:1" in evaluation.description
        assert _values(evaluation)["error_type"] == "ConnectionFailure"
        assert PASSWORD not in evaluation.description
        assert all(PASSWORD not in str(v) for v in _values(evaluation).values())


def test_the_integrity_job_names_a_model_the_destination_does_not_receive(config_path: Path) -> None:
    defs = build_definitions(str(config_path))
    with dg.instance_for_test() as instance:
        result = _run_checks(defs, instance, "acme_delta", ("orders",))
        assert not result.success
        (failure,) = [e for e in result.all_events if e.is_step_failure]
        message = failure.step_failure_data.error.message
        assert "destination 'acme_delta' receives no enabled model named 'orders'" in message
        assert "(it receives: items)" in message
        assert "Fix: name models it receives in ops.run_integrity.config.models" in message
        assert result.get_asset_check_evaluations() == []
        assert _run_checks(defs, instance, "nowhere").success is False


def test_error_results_mask_the_configured_passwords(config_path: Path) -> None:
    config = load_config(config_path)
    exc = ConnectionFailure("PostgreSQL destination 'globex_pg'", reason=f"password {PASSWORD} refused")
    key = dg.AssetCheckKey(GLOBEX_KEY, CHECK_NAME)
    result = error_result(exc, config, "globex_pg", "items", key)
    assert (result.asset_key, result.check_name) == (key.asset_key, CHECK_NAME)
    assert not result.passed
    assert PASSWORD not in result.description
    assert "password *** refused" in result.description
    assert all(PASSWORD not in str(v.value) for v in result.metadata.values())


def test_materialize_with_the_assets_checks_moves_the_rows_then_checks_them(config_path: Path, spark) -> None:
    """The UI's Materialize sends an asset's checks along: the rows move, then the integrity check
    compares them in the same run; the integrity job alone moves nothing."""
    defs = build_definitions(str(config_path))
    materialize = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection={ACME_KEY}, asset_check_selection={dg.AssetCheckKey(ACME_KEY, CHECK_NAME),
                                                           dg.AssetCheckKey(ACME_KEY, "last_transfer")})
    with dg.instance_for_test() as instance:
        result = materialize.execute_in_process(instance=instance, raise_on_error=False)
        assert result.success
        assert [m.asset_key for m in result.get_asset_materialization_events()] == [ACME_KEY]
        evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
        assert set(evaluations) == {CHECK_NAME, "last_transfer"}
        assert evaluations[CHECK_NAME].passed
        assert (_values(evaluations[CHECK_NAME])["rows_compared"], _values(evaluations[CHECK_NAME])["missing"]) == (6, 0)

        DeltaTable(str(config_path.parent / "dest" / "items")).delete("id = 3")
        checked = _run_checks(defs, instance, "acme_delta", ("items",))
        assert checked.get_asset_materialization_events() == []  # nothing moved: the row stays missing
        (evaluation,) = checked.get_asset_check_evaluations()
        assert (evaluation.passed, _values(evaluation)["missing"]) == (False, 1)
