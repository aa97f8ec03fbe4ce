"""The contract with Dagster's private names (``orchestration/speed/dagster_internals.py``).

Run it first after bumping Dagster in ``uv.lock``: one case per fenced name, each failing with the
sentence that names what this Dagster lacks (the name, what it is for); then the shapes we rely on
beyond presence; then that nothing else of the platform reaches past the door, that importing it
patches nothing, and what the launcher does on a Dagster it does not know (Dagster's own path,
with a warning; the other parts' fallbacks: ``test_dagster_fallbacks.py``). CI's Dagster-next lane
(``scripts/dev``) runs it on the newest patch of the locked release line too (``TP_DAGSTER_NEXT``:
that version).
"""

from __future__ import annotations

import inspect
import io
import json
import os
import re
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.code_pointer import ModuleCodePointer
from dagster._core.launcher import LaunchRunContext
from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin

from transfer_platform.orchestration.speed import dagster_internals
from transfer_platform.orchestration.speed.dagster_internals import (
    FENCED,
    PROVEN_DAGSTER_VERSIONS,
    Fenced,
    UnprovenDagsterWarning,
    UnsupportedDagsterError,
)
from transfer_platform.orchestration.speed.launcher import PreloadedRunLauncher
from transfer_platform.orchestration.speed.run_worker import WORKER_TAG, Parent

PACKAGE = Path(__file__).resolve().parents[2] / "transfer_platform"
UNKNOWN = "1.99.0"
#: how many private Dagster names the platform may reach: a new one replaces another, or is a
#: decision (an entry of dagster_internals.FENCED whose ``public`` says which public alternative was
#: checked and why it does not do) made by raising this number, with its reason, in the same change
FENCED_CAP = 40


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each case sees the once-per-process warnings as a process starting would."""
    monkeypatch.setattr(dagster_internals, "_CHECKED", {})
    monkeypatch.setattr(dagster_internals, "_WARNED", set())


def locked_dagster() -> str:
    (locked,) = re.findall(r'\nname = "dagster"\nversion = "([^"]+)"', (PACKAGE.parent / "uv.lock").read_text())
    return locked


@pytest.mark.parametrize("fenced", FENCED, ids=[f.path for f in FENCED])
def test_this_dagster_has_the_fenced_name(fenced: Fenced) -> None:
    assert fenced.problem() is None, fenced.problem()


def test_the_locked_and_the_installed_dagster_are_proven() -> None:
    locked = locked_dagster()
    expected = os.environ.get("TP_DAGSTER_NEXT") or locked  # the Dagster-next lane's, or the lock's
    assert dg.__version__ == expected, f"this environment's Dagster is {dg.__version__}, not {expected}: " \
                                       "`bash scripts/dev setup`"
    for version in {locked, dg.__version__}:
        assert dagster_internals.proven(version), (
            f"Dagster {version} is outside PROVEN_DAGSTER_VERSIONS ({PROVEN_DAGSTER_VERSIONS}): run this file "
            "and the orchestration tests on it (the Dagster-next lane does), then widen the range")


@pytest.mark.parametrize(("version", "proven"), [
    ("1.13.27", True), ("1.13.28", True), ("1.13.29", True), ("1.13.40", True),
    ("1.13.26", False), ("1.14.0", False), ("1.14.0rc1", False), ("2.0.0", False), ("not a version", False)])
def test_the_proven_versions_are_a_range(version: str, proven: bool) -> None:
    assert dagster_internals.proven(version) is proven


def test_the_number_of_fenced_names_is_capped() -> None:
    assert len(FENCED) <= FENCED_CAP, (
        f"{len(FENCED)} private Dagster names are fenced, more than FENCED_CAP ({FENCED_CAP}): a new one "
        "replaces another, or is a decision (its public alternative checked and its reason written in its "
        "`public`, its fallback said in dagster_internals.LOST): raise FENCED_CAP in this file with it")
    assert len({f.path for f in FENCED}) == len(FENCED), "a name fenced twice"


def test_every_part_names_its_fenced_names() -> None:
    used = {part for fenced in FENCED for part in fenced.parts}
    assert used == set(dagster_internals.PARTS)
    for fenced in FENCED:
        assert fenced.use, f"{fenced.path}: say what it is for"
        assert fenced.public.removeprefix("none").strip(" ()"), (
            f"{fenced.path}: say which public alternative was checked, and why it does not do")


# -- the shapes we rely on beyond presence ---------------------------------------------------------

def test_the_queue_config_takes_more_tag_limits() -> None:
    base = dg.QueuedRunCoordinator(tag_concurrency_limits=[{"key": "a", "limit": 1}]).get_run_queue_config()
    extended = dagster_internals.with_tag_limits(base, [{"key": "b", "limit": 2}])
    assert [rule["key"] for rule in extended.tag_concurrency_limits] == ["a", "b"]
    assert extended.max_concurrent_runs == base.max_concurrent_runs


def test_a_plugin_keeps_the_instance_dagster_registers(tmp_path: Path) -> None:
    launcher = PreloadedRunLauncher()
    assert not launcher.has_instance
    with pytest.raises(dg.DagsterInvariantViolationError, match="has no instance"):
        launcher.platform_instance  # noqa: B018
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        launcher.register_instance(instance)
        assert launcher.has_instance  # Dagster's own record of it, as before
        assert launcher.platform_instance is instance
    launcher.dispose()


def test_check_statuses_of_a_finished_evaluation() -> None:
    status = dagster_internals.CHECK_STATUS.get()
    assert {s.name for s in status} >= {"SUCCEEDED", "FAILED", "PLANNED"}


def test_the_code_servers_executions_hold_the_instance_ref_second() -> None:
    """``running_executions`` reads ``_executions[run_id][1]`` as the run's instance ref."""
    source = inspect.getsource(dagster_internals.api_server_class())
    assert re.search(r"self\._executions: dict\[str, tuple\[[\w.]+, InstanceRef\]\]", source), \
        "DagsterApiServer._executions no longer maps a run id to (process, instance ref)"


# -- the messages: a missing name is named --------------------------------------------------------

def test_a_missing_name_is_named_with_its_use_and_the_proven_versions() -> None:
    gone = Fenced("dagster._core.nowhere", "thing", ("launcher",), use="testing the door", public="none")
    expected = (f"Dagster {dg.__version__} lacks dagster._core.nowhere.thing, used for testing the door; "
                f"transfer_platform is proven on Dagster {PROVEN_DAGSTER_VERSIONS}")
    assert gone.problem() == expected
    with pytest.raises(UnsupportedDagsterError, match=re.escape(expected)):
        gone.get()


def test_a_changed_signature_or_attribute_is_named() -> None:
    changed = Fenced("dagster._utils", "get_run_crash_explanation", ("run_worker",), use="u", public="p",
                     params=("prefix", "exit_status"))
    assert "get_run_crash_explanation does not take exit_status (it takes prefix, exit_code)" in changed.problem()
    gone = Fenced("dagster._grpc.server", "DagsterApiServer._runs", ("dev_stop",), use="u", public="p",
                  instance_attribute=True)
    assert gone.problem().startswith(f"Dagster {dg.__version__} lacks dagster._grpc.server.DagsterApiServer._runs")
    other = Fenced("dagster._core.storage.tags", "HIDDEN_TAG_PREFIX", ("run_tags",), use="u", public="p",
                   value=".hidden/")
    assert "is '.dagster/', not '.hidden/'" in other.problem()


def test_an_unknown_part_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown part 'launchr'"):
        dagster_internals.problems("launchr")


# -- nothing else reaches past the door -----------------------------------------------------------

PRIVATE_IMPORT = re.compile(r"^\s*(from|import)\s+dagster(_shared)?\.(_|cli\b)", re.MULTILINE)
PRIVATE_ATTRIBUTE = re.compile(r"\._(instance|run_ids|dequeue_interval_seconds|executions|execution_lock|"
                               r"termination_events|termination_times|check_for_orphaned_runs|"
                               r"find_hourly_schedule_time|execute_run_command_body)\b")


def test_no_module_but_the_door_imports_dagsters_private_names() -> None:
    door = PACKAGE / "orchestration" / "speed" / "dagster_internals.py"
    offenders = [f"{path.relative_to(PACKAGE.parent)}: {match.group(0).strip()}"
                 for path in sorted(PACKAGE.rglob("*.py")) if path != door
                 for pattern in (PRIVATE_IMPORT, PRIVATE_ATTRIBUTE)
                 for match in pattern.finditer(path.read_text())]
    assert not offenders, "private Dagster names outside dagster_internals.py:\n" + "\n".join(offenders)


def test_importing_the_platform_patches_nothing() -> None:
    code = ("import transfer_platform.definitions, transfer_platform.orchestration.scheduling.coordinator, "
            "transfer_platform.orchestration.speed.launcher, transfer_platform.orchestration.speed.run_worker\n"
            "from transfer_platform.orchestration.speed.dagster_fixes import installed, dev_stop_installed\n"
            "print(installed(), dev_stop_installed())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "DAGSTER_IS_DEV_CLI": "1"})
    assert out.stdout.split() == ["False", "False"], out.stderr


# -- a Dagster the platform does not know ---------------------------------------------------------

def test_an_unproven_dagster_refuses_the_fork_and_says_why() -> None:
    assert dagster_internals.fork_refusal(locked_dagster()) is None
    refusal = dagster_internals.fork_refusal(UNKNOWN)
    assert refusal.startswith(f"Dagster {UNKNOWN} is not among the versions the preloaded run worker "
                              f"is proven on ({PROVEN_DAGSTER_VERSIONS})")
    assert "Dagster's own path" in refusal


def test_on_an_unproven_dagster_the_launcher_is_dagsters_default(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        launcher = PreloadedRunLauncher(dagster_version=UNKNOWN)
        PreloadedRunLauncher(dagster_version=UNKNOWN).dispose()  # a second one in the process: no second warning
    (warning,) = [str(w.message) for w in record if issubclass(w.category, UnprovenDagsterWarning)]
    assert f"Dagster {UNKNOWN} is not among" in warning
    assert warning.endswith(f"Lost: {dagster_internals.LOST['run_worker']}")
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        launcher.register_instance(instance)
        origin = JobPythonOrigin("recording", RepositoryPythonOrigin(
            executable_path=sys.executable, code_pointer=ModuleCodePointer("nowhere.defs", "defs", str(tmp_path))))
        run = instance.create_run(
            job_name="recording", run_id=str(uuid.uuid4()), run_config={}, resolved_op_selection=None,
            step_keys_to_execute=None, status=dg.DagsterRunStatus.NOT_STARTED, op_selection=None,
            root_run_id=None, parent_run_id=None, tags={}, job_snapshot=None, execution_plan_snapshot=None,
            parent_job_snapshot=None, asset_selection=None, asset_check_selection=None,
            remote_job_origin=None, job_code_origin=origin, asset_graph=None)
        # straight to DefaultRunLauncher.launch_run, which asks the workspace's code server (none here)
        with pytest.raises(dg.DagsterInvariantViolationError, match="requires a workspace"):
            launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
        assert not launcher._parents, "no preloaded parent was started"
        assert WORKER_TAG not in instance.get_run_by_id(run.run_id).tags
        launcher.dispose()


def test_on_the_proven_dagster_the_launcher_forks_without_a_warning(recwarn: pytest.WarningsRecorder) -> None:
    launcher = PreloadedRunLauncher(dagster_version=locked_dagster())
    assert launcher.fork_refusal is None
    assert not [w for w in recwarn if issubclass(w.category, UnprovenDagsterWarning)]


def test_a_run_worker_parent_on_an_unproven_dagster_refuses_every_run() -> None:
    """The code location's Python may hold another Dagster than the daemon's: its parent says so,
    and the launcher leaves that code location to Dagster's own path with that sentence."""
    control = io.StringIO()
    parent = Parent(control)
    parent.unsupported = dagster_internals.fork_refusal(UNKNOWN)  # what main() finds on such a Dagster
    assert parent.start("r1") is False
    answer = json.loads(control.getvalue())
    assert answer == {"run_id": "r1", "refused": "unsupported", "why": parent.unsupported}
    assert not parent.children, "nothing was forked"
