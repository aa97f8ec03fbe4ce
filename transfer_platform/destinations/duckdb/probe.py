"""``test-connection`` of a DuckDB destination."""

from __future__ import annotations

import shutil
import uuid
from typing import TYPE_CHECKING

from transfer_platform.core.sql import qualified, quote_ident
from transfer_platform.errors import ConnectionFailure, first_line
from transfer_platform.storage.folders import folder_fix, missing_parents, probe_folder

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.duckdb.writer import DuckdbWriter
    from transfer_platform.probes import Check, Probe

NEW = "it does not exist yet; the first transfer creates it"


def probe_destination(self: DuckdbWriter, models: list[ModelConfig], target: str) -> list[Check]:
    """The folder (made for the probe if missing, then removed) and files in it (DuckDB's write-ahead
    log, the staging files, the locks), then the file: opened read-write (not locked by another
    process, a DuckDB database) and what a transfer does in its schema, in a transaction rolled back."""
    from transfer_platform.probes import Probe

    probe, folder, created = Probe(target), self.path.parent, missing_parents(self.path.parent)
    steps = [f"write, rename and delete files in {folder}", f"open {self.path} for writing (not locked "
             "by another process)", f"create, alter and drop tables in schema {self.schema}"]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        probe.failed(f"create folder {folder}", exc.strerror or str(exc), folder_fix(created[0] if created else folder))
        probe.skipped(steps, "no folder")
        return probe.checks
    try:
        probe.passed(f"create folder {folder}", NEW if created else "it exists")
        if not probe_folder(probe, folder, steps[0]):
            probe.skipped(steps[1:], "the folder is not writable")
        elif not self.path.exists():
            probe.passed(steps[1], NEW)
            probe.skipped(steps[2:], "no file yet")
        else:
            _probe_file(self, probe, steps[1:])
    finally:
        for made in reversed(created):
            shutil.rmtree(made, ignore_errors=True)
    return probe.checks


def _probe_file(self: DuckdbWriter, probe: Probe, steps: list[str]) -> None:
    import duckdb

    try:
        conn = self._open(read_only=False, wait=False)
    except ConnectionFailure as exc:
        probe.failed(steps[0], exc.reason, exc.fix)
        probe.skipped(steps[1:], "the file cannot be opened")
        return
    probe.passed(steps[0])
    name = qualified(self.schema, f"_tp_probe_{uuid.uuid4().hex[:12]}")
    try:
        conn.begin()
        for statement in (f"CREATE SCHEMA IF NOT EXISTS {quote_ident(self.schema)}",
                          f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, v VARCHAR)",
                          f"INSERT INTO {name} VALUES (1, 'a') ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
                          f"ALTER TABLE {name} ADD COLUMN w BIGINT", f"DROP TABLE {name}"):
            conn.execute(statement).fetchall()
        probe.passed(steps[1])
    except duckdb.Error as exc:
        probe.failed(steps[1], first_line(exc), "open the file with the duckdb package and check that it "
                                                 "is writable (not attached read-only, enough disk)")
    finally:
        conn.close()  # the transaction rolled back
