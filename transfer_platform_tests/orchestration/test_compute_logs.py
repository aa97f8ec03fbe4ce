"""``FileComputeLogManager`` (``compute_logs`` of the production instance file): a step's stdout
and stderr land in the files the UI reads, as with Dagster's own manager, and no ``tail`` process
mirrors them while the step runs."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import dagster as dg
import yaml

from transfer_platform.orchestration.speed import compute_logs
from transfer_platform.orchestration.speed.compute_logs import FileComputeLogManager
from transfer_platform.orchestration.speed.dagster_internals import LOST, REDIRECT_TO_FILE
from transfer_platform_tests.support.fence import fallbacks, hide
from transfer_platform_tests.support.platform import REPO
from transfer_platform_tests.support.processes import live_children


def tail_children() -> int:
    """``tail`` processes of this process (Dagster's mirror of a captured stream)."""
    return sum(name == "tail" for _pid, name in live_children(os.getpid()))


@dg.op
def speak(context) -> int:
    sys.stdout.write("to stdout from the step\n")
    sys.stdout.flush()
    os.write(sys.stderr.fileno(), b"to stderr from the step, by its file descriptor\n")
    return tail_children()


@dg.job(executor_def=dg.in_process_executor)
def speaking():
    speak()


def captured(instance: dg.DagsterInstance, run_id: str) -> tuple[str, str]:
    (event,) = instance.all_logs(run_id, of_type=dg.DagsterEventType.LOGS_CAPTURED)
    data = instance.compute_log_manager.get_log_data(
        [run_id, "compute_logs", event.dagster_event.logs_captured_data.file_key])
    return (data.stdout or b"").decode(), (data.stderr or b"").decode()


def run_with(tmp_path: Path, compute_logs: dict | None) -> tuple[int, str, str]:
    settings = {"compute_logs": compute_logs} if compute_logs else {}
    tmp_path.mkdir(parents=True)
    with dg.instance_for_test(temp_dir=str(tmp_path), overrides=settings) as instance:
        result = speaking.execute_in_process(instance=instance)
        assert result.success
        return (result.output_for_node("speak"), *captured(instance, result.run_id))


def test_the_production_file_names_it(tmp_path: Path) -> None:
    production = yaml.safe_load((REPO / "deploy" / "dagster.production.yaml").read_text())
    assert production["compute_logs"]["module"] == FileComputeLogManager.__module__
    assert production["compute_logs"]["class"] == FileComputeLogManager.__name__


def test_a_steps_output_is_captured_without_a_mirror(tmp_path: Path) -> None:
    tails, out, err = run_with(tmp_path / "file", {
        "module": FileComputeLogManager.__module__, "class": FileComputeLogManager.__name__,
        "config": {"base_dir": str(tmp_path / "file" / "logs")}})
    assert "to stdout from the step" in out
    assert "to stderr from the step, by its file descriptor" in err
    assert tails == 0
    # Dagster's own manager captures the same, with a tail process per stream while the step runs
    tails, out, err = run_with(tmp_path / "local", None)
    assert "to stdout from the step" in out
    assert "to stderr from the step, by its file descriptor" in err
    assert tails == 2


def test_the_compute_log_manager_falls_back_to_dagsters_capture(tmp_path: Path, monkeypatch) -> None:
    hide(monkeypatch, REDIRECT_TO_FILE)
    manager = {"module": compute_logs.__name__, "class": "FileComputeLogManager",
               "config": {"base_dir": str(tmp_path / "file" / "logs")}}
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        tails, out, err = run_with(tmp_path / "file", manager)
    assert "to stdout from the step" in out  # captured all the same, in the files the UI reads
    assert "to stderr from the step, by its file descriptor" in err
    assert tails == 2  # Dagster's own capture: its tail mirror per stream
    (message,) = fallbacks(record)
    assert REDIRECT_TO_FILE.path in message
    assert LOST["compute_logs"] in message
