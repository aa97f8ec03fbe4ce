"""A transfer run by the plain command line (no --enqueue) with ``$DAGSTER_HOME`` set records in
that instance what a transfer run in Dagster records for its assets: each committed window as a
materialization, each model's outcome as its ``last_transfer`` check, and a failure also as an
observation of the asset with the error. On the terminal a failure is one ``error:`` line."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transfer_platform.cli import main
from transfer_platform_tests.support.platform import TENANTS, TS, dagster_home, write_config

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")
ITEMS = dg.AssetKey(["acme", "acme_delta", "items"])
CHECK = dg.AssetCheckKey(ITEMS, "last_transfer")


def _last_transfer(instance: dg.DagsterInstance):  # -> AssetCheckEvaluation | None
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([CHECK]).get(CHECK)
    event = record.event.dagster_event if record is not None and record.event is not None else None
    return event.asset_check_evaluation_data if event is not None else None


@pytest.mark.integration
def test_a_failed_transfer_on_the_command_line_is_recorded_on_its_asset_and_said_once(
        tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(write_config(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home(tmp_path)))

    assert main(["--config", config, "transfer", "acme_delta", "--model", "items"]) == 0
    capsys.readouterr()
    with dg.DagsterInstance.get() as instance:
        moved = len(instance.fetch_materializations(ITEMS, limit=100).records)
        assert moved == 4  # three days back and the day in progress, one partition each
        passed = _last_transfer(instance)
        assert passed is not None
        assert passed.passed
        assert passed.description.startswith("SUCCESS: 12 row(s) in 4 window(s)")

    # a source row with a NULL last-modified value: the model fails, nothing is written
    bad = pa.table({"id": pa.array([999], pa.int64()), "organization_id": [TENANTS["acme"]],
                    "updated_at": pa.array([None], TS), "v": ["bad"]})
    pq.write_table(bad, tmp_path / "lake" / "items" / "part-1.parquet")
    assert main(["--config", config, "transfer", "acme_delta", "--model", "items"]) == 1
    out, err = capsys.readouterr()
    (model,) = json.loads(out)["models"]
    assert model["status"] == "ERROR"
    errors = [line for line in err.splitlines() if line.startswith("error:") or '"phase"' in line]
    assert len(errors) == 1, err  # one line, not a JSON phase record before it
    assert errors[0].startswith("error: items: ")
    assert "NULL last-modified value (updated_at) at key id=999" in errors[0]
    assert "; fix: " in errors[0], errors[0]
    assert ". Fix:" not in errors[0], errors[0]

    with dg.DagsterInstance.get() as instance:
        failed = _last_transfer(instance)
        assert failed is not None
        assert not failed.passed
        assert failed.severity == dg.AssetCheckSeverity.ERROR
        assert failed.description.startswith("ERROR: ")
        assert "NULL last-modified value" in failed.description
        assert failed.metadata["blame"].value == "provider"
        assert failed.metadata["transfer_id"].value == json.loads(out)["transfer_id"]
        (observed,) = instance.fetch_observations(ITEMS, limit=10).records
        observation = observed.asset_observation
        assert observation.description == failed.description
        assert observation.metadata["error_type"].value == "DataError"
        assert "NULL last-modified value" in observation.metadata["error"].value
        assert len(instance.fetch_materializations(ITEMS, limit=100).records) == moved  # nothing new



@pytest.mark.parametrize(("level", "shown"), [("WARNING", False), ("ERROR", False), ("INFO", True)])
def test_a_failed_models_phase_record_is_in_a_log_asked_for_not_beside_the_error_line(
        level: str, shown: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The ``error`` phase is a JSON record for a log; by default the command says the failure
    itself, once (``error: <model>: ...``), so the record is not a second ``error:`` line."""
    from transfer_platform.cli import _configure_logging
    from transfer_platform.phases import log_phase

    monkeypatch.setenv("TRANSFER_PLATFORM_LOG_LEVEL", level)
    try:
        assert _configure_logging(verbose=False) is None
        log_phase("error", transfer_id="t", destination="d", model="items", level=logging.ERROR,
                  sink=logging.getLogger("transfer_platform.transfer"), error_type="DataError", error="boom")
        logging.getLogger("transfer_platform").error("another error")
    finally:
        logging.basicConfig(force=True, handlers=[logging.NullHandler()])
    lines = capsys.readouterr().err.splitlines()
    records = [json.loads(line[line.index("{"):]) for line in lines if '{"phase": "error"' in line]
    assert [r["error_type"] for r in records] == (["DataError"] if shown else [])
    assert any(line.endswith("another error") for line in lines)  # other errors still shown


def test_a_transfer_stopped_on_the_command_line_reports_the_model_in_progress_and_those_not_reached(
        tmp_path: Path) -> None:
    """Ctrl-C (or a bug) stops the transfer: the model it was moving and the models it had not
    reached get their outcome as in a Dagster run (KILLED for the user's interrupt)."""
    from datetime import UTC, datetime

    from transfer_platform.config.loading import load_config
    from transfer_platform.orchestration.catalog.reporting import RunlessReporter
    from transfer_platform.transfers.entry import Transfer
    from transfer_platform.transfers.order import TransferOrder
    from transfer_platform.transfers.outcomes import ModelSummary

    config = load_config(write_config(tmp_path))
    transfer = Transfer(spark=None, config=config, order=TransferOrder(destination="acme_delta"),
                        transfer_id="t-1", now=datetime.now(UTC))
    transfer.summaries.append(ModelSummary("items"))  # in progress when the interrupt came
    notes = dg.AssetKey(["acme", "acme_delta", "notes"])
    with dg.DagsterInstance.ephemeral() as instance:
        RunlessReporter(instance, config, "acme_delta").stopped(transfer, KeyboardInterrupt())
        found = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [CHECK, dg.AssetCheckKey(notes, "last_transfer")])
        for key in (CHECK, dg.AssetCheckKey(notes, "last_transfer")):
            evaluation = found[key].event.dagster_event.asset_check_evaluation_data
            assert not evaluation.passed
            assert evaluation.severity == dg.AssetCheckSeverity.WARN
            assert evaluation.description.startswith("KILLED: cancelled by a user while it moved model 'items'")
            assert evaluation.metadata["transfer_id"].value == "t-1"
        assert len(instance.fetch_observations(ITEMS, limit=10).records) == 1
        assert len(instance.fetch_observations(notes, limit=10).records) == 1
