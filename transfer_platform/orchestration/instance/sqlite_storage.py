"""Dagster's SQLite storage, created and migrated by one process at a time: the storage of the
shipped ``dagster.yaml`` (its ``instance_class``).

Dagster's SQLite storages (``runs.db``, ``schedules.db``, the event log's ``index.db`` and one
database per run) create their tables and stamp their migration record (alembic's
``alembic_version`` table) when a process opens a database that lacks them, with no lock between
processes. Processes of one ``DAGSTER_HOME`` that start together (the API and the daemon, the
webserver and its code server) then each create and stamp: one stamps the current revision on the
tables it created, another sees those tables without a record and stamps the revision Dagster gives
tables of unknown age. The record holds two rows and no process can open the instance again
(alembic: "Version table 'alembic_version' has more than one head present").

Here each storage is Dagster's own with its creation and migration under an exclusive file lock
(``fcntl.flock`` on :data:`LOCK_FILE` in the storage's folder): one process creates and stamps, the
others wait and find it done. A record broken before (by processes without the lock) is repaired
when it is unambiguous: the current revision is one of its rows and the others are older revisions
of the same line, the stale stamps of that race; the current row is kept. Any other broken record
is refused with what to do (:func:`record_problem`); ``python -m
transfer_platform.orchestration.instance.sqlite_storage [DAGSTER_HOME]`` repairs a home without opening it.

The shipped ``dagster.yaml`` names :class:`TransferPlatformInstance`, whose storage, when the file
names none, is :class:`LockedSqliteStorage` in the instance's own home (Dagster's default storage,
locked). A storage block in ``dagster.yaml`` (PostgreSQL in production) replaces it. On a Dagster
lacking a name used here (:mod:`~transfer_platform.orchestration.speed.dagster_internals`, part
``sqlite_lock``) the instance gets Dagster's own storage, with one warning.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any

import dagster

from transfer_platform.errors import DagsterStorageError
from transfer_platform.orchestration.speed import dagster_internals as internals

log = logging.getLogger(__name__)

#: the lock file in each storage's folder (not ``*.db``: the event log lists its run databases so)
LOCK_FILE = "storage.lock"
#: the SQLite files of a home's storage whose migration record can break, under ``DAGSTER_HOME``
#: (a run's own event-log database is stamped with the current revision only, so its record cannot)
DATABASES = ("history/runs.db", "history/runs/index.db", "schedules/schedules.db")
REPAIR_COMMAND = "-m transfer_platform.orchestration.instance.sqlite_storage"

_held = threading.local()


@contextmanager
def creation_lock(folder: str) -> Iterator[None]:
    """Hold the exclusive lock of the storage in ``folder`` (re-entrant in a thread; another thread
    or process waits)."""
    path = os.path.join(os.path.abspath(folder), LOCK_FILE)
    held: set[str] = _held.__dict__.setdefault("paths", set())
    if path in held:
        yield
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as handle:  # closing it releases the lock
        fcntl.flock(handle, fcntl.LOCK_EX)
        held.add(path)
        try:
            yield
        finally:
            held.discard(path)


# -- the migration record --------------------------------------------------------------------------

def revisions() -> list[str]:
    """Dagster's storage revisions, the current one (head) first, then each older one in turn."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", internals.ALEMBIC_SCRIPTS.get())
    return [r.revision for r in ScriptDirectory.from_config(config).iterate_revisions("head", "base")]


def migration_record(database: str) -> list[str]:
    """The rows of ``database``'s ``alembic_version`` table ([] without the file or the table)."""
    if not os.path.exists(database):
        return []
    with closing(sqlite3.connect(database, timeout=30)) as connection:
        try:
            return [row[0] for row in connection.execute("SELECT version_num FROM alembic_version")]
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise


@dataclass(frozen=True)
class Record:
    """A migration record of several rows: ``stale`` rows to delete, or (``stale`` empty) a
    record this module does not repair, with the ``fix`` that does."""

    database: str
    rows: tuple[str, ...]
    stale: tuple[str, ...]
    fix: str

    @property
    def problem(self) -> str:
        return (f"has a broken migration record: its alembic_version table holds {len(self.rows)} rows "
                f"({', '.join(self.rows)}) where Dagster keeps one")


def broken_record(database: str) -> Record | None:
    """None when ``database``'s migration record is whole (one row, or none yet); else what is wrong."""
    rows = migration_record(database)
    if len(rows) < 2:
        return None
    line = revisions()
    head = line[0]
    if head in rows and all(r in line for r in rows):  # the race's stale stamps beside the current one
        return Record(database, tuple(rows), tuple(r for r in rows if r != head), fix=(
            f"{sys.executable} {REPAIR_COMMAND} {_home_of(database)} (it keeps {head}, the current revision: "
            "the other rows are stale stamps of processes that created the storage at once), then restart "
            "whichever of Dagster's processes stopped on it"))
    known = sorted((r for r in rows if r in line), key=line.index)
    if not known:
        return Record(database, tuple(rows), (), fix=(
            f"none of them is a revision of this Dagster ({dagster.__version__}): open the storage with the "
            "Dagster that wrote it, or move the file away to start it afresh (its history is lost)"))
    keep = known[-1]  # the oldest: `dagster instance migrate` brings it to the current revision
    return Record(database, tuple(rows), (), fix=(
        f"keep the row of the revision the tables are at, the oldest being the safe choice: "
        f"sqlite3 {database} \"DELETE FROM alembic_version WHERE version_num <> '{keep}'\" "
        f"&& DAGSTER_HOME={_home_of(database)} dagster instance migrate"))


def _home_of(database: str) -> str:
    for relative in DATABASES:
        if os.path.abspath(database).endswith(os.sep + relative):
            return os.path.abspath(database)[: -len(relative) - 1]
    return os.path.dirname(os.path.abspath(database))


def repair(database: str) -> list[str]:
    """Delete the stale rows of ``database``'s migration record when it is unambiguous (the rows
    deleted; [] when whole); :class:`DagsterStorageError` with the fix when it is not."""
    record = broken_record(database)
    if record is None:
        return []
    if not record.stale:
        raise DagsterStorageError(database, record.problem, fix=record.fix)
    with closing(sqlite3.connect(database, timeout=30)) as connection, connection:
        connection.executemany("DELETE FROM alembic_version WHERE version_num = ?", [(r,) for r in record.stale])
    log.warning("Dagster's storage at %s: removed the stale rows %s of its migration record (two processes "
                "had created it at once)", database, ", ".join(record.stale))
    return list(record.stale)


def repair_home(home: str) -> dict[str, list[str]]:
    """:func:`repair` of each of the home's databases that has a record, under its storage's lock."""
    done = {}
    for relative in DATABASES:
        database = os.path.join(home, relative)
        if os.path.exists(database):
            with creation_lock(os.path.dirname(database)):
                done[database] = repair(database)
    return done


def record_problem(home: str, error: BaseException | str) -> DagsterStorageError | None:
    """What ``error`` (raised while opening the instance of ``home``, here or in a code server)
    means when it comes from Dagster's migration record: the broken database and its fix, or the
    storage caught being created by another process; None for any other error."""
    text = str(error)
    if "alembic_version" not in text:
        return None
    for relative in DATABASES:
        record = broken_record(os.path.join(home, relative))
        if record is not None:
            return DagsterStorageError(record.database, record.problem, fix=record.fix)
    reason = (text.strip().splitlines() or [type(error).__name__])[0][:300]
    return DagsterStorageError(home, f"was being created by another process at the same moment ({reason})", fix=(
        "ask again; with the shipped dagster.yaml in $DAGSTER_HOME (its instance_class) every process "
        "creates the storage under one lock, so this cannot happen"))


# -- the locked storages ---------------------------------------------------------------------------

def _base(fenced: internals.Fenced) -> type:
    return fenced.get() if fenced.problem() is None else object


class _CreatedUnderTheLock:
    """What the run and schedule storages add to Dagster's: ``from_local`` (how Dagster opens
    them) under the lock, the record of :attr:`DATABASE` repaired first."""

    DATABASE: str

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> Any:
        return cls.from_local(inst_data=inst_data, **config_value)

    @classmethod
    def from_local(cls, base_dir: str, inst_data: Any = None) -> Any:
        with creation_lock(base_dir):
            repaired = repair(os.path.join(base_dir, cls.DATABASE))
            storage = super().from_local(base_dir, inst_data)  # type: ignore[misc]  # Dagster's
            if repaired:  # the data migrations its creator may not have reached
                storage.migrate()
        return storage


class LockedSqliteRunStorage(_CreatedUnderTheLock, _base(internals.SQLITE_RUN_STORAGE)):
    """Dagster's ``SqliteRunStorage`` (``runs.db``), created and migrated under the lock."""

    DATABASE = "runs.db"


class LockedSqliteScheduleStorage(_CreatedUnderTheLock, _base(internals.SQLITE_SCHEDULE_STORAGE)):
    """Dagster's ``SqliteScheduleStorage`` (``schedules.db``), created and migrated under the lock."""

    DATABASE = "schedules.db"


class LockedSqliteEventLogStorage(_base(internals.SQLITE_EVENT_LOG_STORAGE)):
    """Dagster's ``SqliteEventLogStorage``: ``index.db`` (created with its data migrations when the
    storage opens) and each run's database (created on its first use) under the lock."""

    def __init__(self, base_dir: str, inst_data: Any = None) -> None:
        with creation_lock(base_dir):
            repair(os.path.join(base_dir, "index.db"))
            super().__init__(base_dir, inst_data)

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> Any:
        return cls(inst_data=inst_data, **config_value)

    def _initdb(self, engine: Any, for_index_shard: bool = False) -> None:
        with creation_lock(self._base_dir):
            super()._initdb(engine, for_index_shard=for_index_shard)


class LockedSqliteStorage(_base(internals.SQLITE_STORAGE)):
    """Dagster's ``DagsterSqliteStorage`` (the three storages in their usual folders of
    ``base_dir``) of the locked storages."""

    def __init__(self, base_dir: str, inst_data: Any = None) -> None:
        self.base_dir = base_dir
        self._run_storage = LockedSqliteRunStorage.from_local(os.path.join(base_dir, "history", ""))
        self._event_log_storage = LockedSqliteEventLogStorage(os.path.join(base_dir, "history", "runs", ""))
        self._schedule_storage = LockedSqliteScheduleStorage.from_local(os.path.join(base_dir, "schedules"))
        self._inst_data = inst_data
        super(internals.SQLITE_STORAGE.get(), self).__init__()  # DagsterStorage's: the storages are ours

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> Any:
        return cls(inst_data=inst_data, **config_value)


#: the storages Dagster gives an instance that names none, and the locked class of each
_LOCKED = {"storage": LockedSqliteStorage, "run_storage": LockedSqliteRunStorage,
           "event_log_storage": LockedSqliteEventLogStorage, "schedule_storage": LockedSqliteScheduleStorage}


class TransferPlatformInstance(dagster.DagsterInstance):
    """Dagster's instance whose default storage (no storage block in ``dagster.yaml``) is the
    locked SQLite storage, in the instance's home. Nothing else differs."""

    @classmethod
    def config_schema(cls) -> dict:
        return {}

    @classmethod
    def config_defaults(cls, base_dir: str) -> Mapping[str, Any]:
        defaults = dict(internals.INSTANCE_DEFAULTS.get()(base_dir))
        if internals.fallback("sqlite_lock"):
            return defaults
        for key, locked in _LOCKED.items():  # same folders (config_yaml), locked classes
            defaults[key] = defaults[key]._replace(module_name=__name__, class_name=locked.__name__)
        return defaults


def main(argv: list[str] | None = None) -> int:
    """Repair the migration records of a home's storage (``argv``: the home; else $DAGSTER_HOME)."""
    arguments = sys.argv[1:] if argv is None else argv
    home = arguments[0] if arguments else os.environ.get("DAGSTER_HOME", "")
    if not home or not os.path.isdir(home):
        print(f"usage: python {REPAIR_COMMAND} [DAGSTER_HOME] (a folder; $DAGSTER_HOME by default)",  # noqa: T201
              file=sys.stderr)
        return 2
    try:
        done = repair_home(home)
    except DagsterStorageError as exc:
        print(exc, file=sys.stderr)  # noqa: T201
        return 1
    for database, removed in done.items():
        print(f"{database}: " + (f"removed the stale rows {', '.join(removed)}" if removed  # noqa: T201
                                 else "its migration record is whole"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
