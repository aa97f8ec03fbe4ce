"""Dagster's SQLite storage of the shipped ``dagster.yaml`` cannot be broken by processes that start
together (``orchestration/instance/sqlite_storage.py``), and a broken migration record is repaired or
reported as what it is, with a fix that works.

Real processes on a fresh ``DAGSTER_HOME``: each imports Dagster, then waits for the others (a
file they all watch) and opens the instance at the same moment, touching its run, event-log and
schedule storage. With Dagster's own storage classes (the file without its ``instance_class``) the
same rounds leave two rows in a ``alembic_version`` table or fail a process ("table runs already
exists", "more than one head present") in most rounds on this machine.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from transfer_platform.errors import DagsterStorageError
from transfer_platform.orchestration.instance import sqlite_storage
from transfer_platform_tests.support.platform import REPO

#: Dagster's revision for tables found without a record (what a second process stamps in the race)
TABLES_OF_UNKNOWN_AGE = "5771160a95ad"
PROCESSES, ROUNDS = 4, 2

OPEN_TOGETHER = """
import json, os, sys, time
import dagster as dg
go = sys.argv[1]
open(f"{go}.ready.{os.getpid()}", "w").close()
while not os.path.exists(go):  # every process imported Dagster: open the instance together
    time.sleep(0.001)
try:
    instance = dg.DagsterInstance.get()
    instance.get_runs(limit=1)
    instance.all_instigator_state()
    instance.event_log_storage.get_asset_keys()
    print(json.dumps({"opened": type(instance).__name__}))
except Exception as exc:
    print(json.dumps({"failed": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}))
"""


def home_with(root: Path, *, locked: bool = True) -> Path:
    """A fresh Dagster home with the shipped ``dagster.yaml`` (``locked=False``: without its
    ``instance_class``, i.e. Dagster's own storage classes)."""
    home = root / "dagster_home"
    home.mkdir(parents=True)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    if not locked:
        settings = yaml.safe_load((home / "dagster.yaml").read_text())
        settings.pop("instance_class")
        (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    return home


def records(home: Path) -> dict[str, list[str]]:
    return {relative: sqlite_storage.migration_record(str(home / relative)) for relative in sqlite_storage.DATABASES}


def open_together(home: Path, count: int) -> list[dict]:
    go = home.parent / "go"
    environment = {**os.environ, "DAGSTER_HOME": str(home)}
    processes = [subprocess.Popen([sys.executable, "-c", OPEN_TOGETHER, str(go)], env=environment,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for _ in range(count)]
    deadline = time.monotonic() + 120
    while len(list(home.parent.glob("go.ready.*"))) < count:
        assert time.monotonic() < deadline, "the processes did not import Dagster within 120 s"
        assert all(p.poll() is None for p in processes), "a process ended before opening the instance"
        time.sleep(0.01)
    go.touch()
    return [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in processes]


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_processes_started_together_create_the_storage_once(tmp_path: Path, round_: int) -> None:
    home = home_with(tmp_path)
    outcomes = open_together(home, PROCESSES)
    head = sqlite_storage.revisions()[0]
    assert outcomes == [{"opened": "TransferPlatformInstance"}] * PROCESSES
    assert records(home) == dict.fromkeys(sqlite_storage.DATABASES, [head])
    with dg.DagsterInstance.from_config(str(home)) as instance:  # and it works afterwards
        assert instance.get_runs() == []
        assert instance.all_instigator_state() == []
        run = instance.create_run_for_job(dg.GraphDefinition("nothing").to_job())
        assert [r.run_id for r in instance.get_runs()] == [run.run_id]


def waits_on_lock(pid: int, lock_file: Path) -> bool:
    """Whether process ``pid`` is blocked on a lock of ``lock_file`` (a waiter in /proc/locks)."""
    inode = os.stat(lock_file).st_ino
    return any(line.split()[1] == "->" and line.split()[5] == str(pid) and line.split()[6].endswith(f":{inode}")
               for line in Path("/proc/locks").read_text().splitlines() if "->" in line)


def test_a_process_opening_the_instance_waits_for_the_one_creating_its_storage(tmp_path: Path) -> None:
    """The race made certain: this process holds the schedule storage's lock (as one creating it
    would); another that opens the instance waits for it, creating nothing there meanwhile, then
    finds the storage to make and makes it once."""
    home = home_with(tmp_path)
    folder = home / "schedules"
    (tmp_path / "go").touch()
    with sqlite_storage.creation_lock(str(folder)):
        child = subprocess.Popen([sys.executable, "-c", OPEN_TOGETHER, str(tmp_path / "go")], text=True,
                                 env={**os.environ, "DAGSTER_HOME": str(home)}, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while child.poll() is None and not waits_on_lock(child.pid, folder / sqlite_storage.LOCK_FILE):
            assert time.monotonic() < deadline, "the process neither waited on the lock nor ended in 120 s"
            time.sleep(0.01)
        assert child.poll() is None, f"it opened the instance without waiting: {child.communicate()[0]}"
        assert not (folder / "schedules.db").exists()
    assert json.loads(child.communicate(timeout=120)[0]) == {"opened": "TransferPlatformInstance"}
    assert records(home) == dict.fromkeys(sqlite_storage.DATABASES, sqlite_storage.revisions()[:1])


def broken(tmp_path: Path, rows: dict[str, list[str]], *, locked: bool = True) -> Path:
    """A home whose storage was created, then given ``rows`` more in the named databases'
    migration records."""
    home = home_with(tmp_path, locked=locked)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.get_runs()
    for relative, extra in rows.items():
        with sqlite3.connect(home / relative) as connection:
            connection.executemany("INSERT INTO alembic_version VALUES (?)", [(r,) for r in extra])
    return home


def test_a_record_left_by_the_race_is_repaired_when_the_instance_opens(tmp_path: Path) -> None:
    head = sqlite_storage.revisions()[0]
    home = broken(tmp_path, {"schedules/schedules.db": [TABLES_OF_UNKNOWN_AGE],
                             "history/runs.db": [TABLES_OF_UNKNOWN_AGE]}, locked=False)
    with pytest.raises(Exception, match="more than one head present"):  # as Dagster's own storage finds it
        dg.DagsterInstance.from_config(str(home))
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_runs() == []
        assert instance.all_instigator_state() == []
    assert records(home) == dict.fromkeys(sqlite_storage.DATABASES, [head])


def test_the_repair_command_mends_a_home_that_dagsters_own_storage_cannot_open(tmp_path: Path) -> None:
    """The fix the reports give for the race's record, run as given, on a home whose dagster.yaml
    names no instance_class (an older copy): Dagster's own storage opens it afterwards."""
    home = broken(tmp_path, {"schedules/schedules.db": [TABLES_OF_UNKNOWN_AGE]}, locked=False)
    with pytest.raises(Exception, match="more than one head present"):
        dg.DagsterInstance.from_config(str(home))
    problem = sqlite_storage.record_problem(str(home), "Version table 'alembic_version' has more than one head")
    assert isinstance(problem, DagsterStorageError)
    assert str(problem).startswith(f"Dagster's storage at {home}/schedules/schedules.db has a broken migration "
                                   f"record: its alembic_version table holds 2 rows (")
    fix = problem.fix.split(" (")[0]
    assert fix == f"{sys.executable} -m transfer_platform.orchestration.instance.sqlite_storage {home}"
    done = subprocess.run(fix.split(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert f"{home}/schedules/schedules.db: removed the stale rows {TABLES_OF_UNKNOWN_AGE}" in done.stdout
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance) is dg.DagsterInstance
        assert instance.all_instigator_state() == []
    assert sqlite_storage.record_problem(str(home), "Version table 'alembic_version' has more than one head") \
        .reason.startswith("was being created by another process")  # nothing broken is left to name


def test_a_record_that_is_not_the_races_is_refused_with_a_fix_that_works(tmp_path: Path) -> None:
    """Two older revisions and not the current one: which the tables are at is not known, so the
    storage refuses to open, naming the file, its rows and the command that mends it."""
    line = sqlite_storage.revisions()
    home = broken(tmp_path, {})
    database = home / "schedules" / "schedules.db"
    with sqlite3.connect(database) as connection:
        connection.execute("DELETE FROM alembic_version")
        connection.executemany("INSERT INTO alembic_version VALUES (?)", [(line[1],), (TABLES_OF_UNKNOWN_AGE,)])
    with pytest.raises(DagsterStorageError) as refused:
        dg.DagsterInstance.from_config(str(home))
    assert str(refused.value).startswith(
        f"Dagster's storage at {database} has a broken migration record: its alembic_version table holds 2 rows "
        f"({line[1]}, {TABLES_OF_UNKNOWN_AGE}) where Dagster keeps one. Fix: keep the row of the revision")
    command = refused.value.fix.split(": ", 1)[1]
    assert f"'{TABLES_OF_UNKNOWN_AGE}'" in command  # the oldest, from which the migrations are guarded
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=300, env=environment,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sqlite_storage.migration_record(str(database)) == [line[0]]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.all_instigator_state() == []


def test_on_a_dagster_without_a_name_it_uses_the_instance_gets_dagsters_own_storage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback: one warning naming what is missing and what is lost; the instance opens."""
    from transfer_platform.orchestration.speed import dagster_internals as internals

    gone = dataclasses.replace(internals.SQLITE_STORAGE, module="dagster._core.storage.gone")
    monkeypatch.setattr(internals, "FENCED", tuple(gone if f is internals.SQLITE_STORAGE else f
                                                   for f in internals.FENCED))
    monkeypatch.setattr(internals, "_CHECKED", {})
    monkeypatch.setattr(internals, "_WARNED", set())
    with pytest.warns(internals.UnprovenDagsterWarning, match=r"lacks dagster\._core\.storage\.gone.*Lost: Dagster's "
                                                              "own SQLite storage"):
        instance = dg.DagsterInstance.from_config(str(home_with(tmp_path)))
    with instance:
        assert type(instance.run_storage).__name__ == "SqliteRunStorage"
        assert instance.get_runs() == []
