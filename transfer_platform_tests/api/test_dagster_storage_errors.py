"""The API names Dagster's own storage when it is what fails (not the store, not a code server):
a broken migration record with the command that mends it, any other SQLite error of it as Dagster's
storage's. The real API over a real store, its ``DAGSTER_HOME`` a Dagster home whose
``dagster.yaml`` names no ``instance_class`` (an older copy: Dagster's own storage classes, which
neither lock nor repair)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import dagster as dg
import yaml

from transfer_platform.orchestration.instance import sqlite_storage
from transfer_platform_tests.support.api import Api

#: Dagster's revision for tables found without a record (what a second process stamps in the race)
TABLES_OF_UNKNOWN_AGE = "5771160a95ad"


def dagsters_own_storage() -> Path:
    """The fixture's Dagster home, its dagster.yaml without the platform's instance class."""
    home = Path(os.environ["DAGSTER_HOME"])
    settings = yaml.safe_load((home / "dagster.yaml").read_text())
    settings.pop("instance_class")
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    return home


def test_a_broken_migration_record_is_named_with_a_fix_that_works(platform_api: Api) -> None:
    home = dagsters_own_storage()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.get_runs()
    database = home / "schedules" / "schedules.db"
    with sqlite3.connect(database) as connection:  # what two processes creating it at once leave
        connection.execute("INSERT INTO alembic_version VALUES (?)", (TABLES_OF_UNKNOWN_AGE,))

    answer = platform_api.get("/transfers")
    assert answer.status_code == 503, answer.text
    message = answer.json()["message"]
    assert message.startswith(f"Dagster's storage at {database} has a broken migration record: its "
                              "alembic_version table holds 2 rows ("), message
    assert "code server" not in message
    assert "store's database" not in message
    command = message.split(". Fix: ", 1)[1].split(" (")[0]
    assert command.endswith(f"-m transfer_platform.orchestration.instance.sqlite_storage {home}")

    done = subprocess.run(command.split(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert sqlite_storage.migration_record(str(database)) == sqlite_storage.revisions()[:1]
    answer = platform_api.get("/transfers")
    assert answer.status_code == 200, answer.text


def test_another_error_of_dagsters_storage_is_not_called_the_stores(platform_api: Api) -> None:
    """SQLite cannot open the run storage's file (a folder stands in its place): 503 naming
    Dagster's storage, where the store's handler used to blame the store's PostgreSQL."""
    home = dagsters_own_storage()
    (home / "history" / "runs.db").mkdir(parents=True)
    answer = platform_api.get("/transfers")
    assert answer.status_code == 503, answer.text
    message = answer.json()["message"]
    assert message.startswith(f"Dagster's storage at {home} failed: unable to open database file. Fix: "), message
    assert "store's database" not in message
