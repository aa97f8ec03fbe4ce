"""``test-connection`` of a DuckDB destination: the folder, files in it, then the file itself (not
locked by another process, a DuckDB database) and what a transfer does in its schema, tried in a
transaction rolled back."""

from __future__ import annotations

import shutil
import uuid
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from transfer_platform.core.sql import qualified, quote_ident
from transfer_platform.destinations.duckdb.file import _all, _first_line, _folder_fix
from transfer_platform.errors import ConnectionFailure

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig
    from transfer_platform.probes import Check


class Probing:
    """The probe (a mixin of ``DuckdbWriter``)."""

    path: Path
    schema: str

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        """The folder (created for the probe if missing, then removed), files written, renamed
        and deleted in it (DuckDB's write-ahead log, the staging files and locks), then the file:
        opened read-write (not locked by another process, a DuckDB database) and everything a
        transfer does in its schema tried in a transaction rolled back."""
        from transfer_platform.probes import Probe

        probe = Probe(target)
        folder = self.path.parent
        created = _missing_parents(folder)
        steps = [f"write, rename and delete files in {folder}", f"open {self.path} for writing (not locked "
                 "by another process)", f"create, alter and drop tables in schema {self.schema}"]
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            probe.failed(f"create folder {folder}", exc.strerror or str(exc), _folder_fix(created[0] if created else folder))
            probe.skipped(steps, "no folder")
            return probe.checks
        try:
            probe.passed(f"create folder {folder}", "it does not exist yet; the first transfer creates it"
                         if created else "it exists")
            if not _probe_folder(probe, steps[0], folder):
                probe.skipped(steps[1:], "the folder is not writable")
            elif not self.path.exists():
                probe.passed(steps[1], "it does not exist yet; the first transfer creates it")
                probe.skipped(steps[2:], "no file yet")
            else:
                self._probe_file(probe, steps[1:])
        finally:
            for made in reversed(created):
                shutil.rmtree(made, ignore_errors=True)
        return probe.checks

    def _probe_file(self, probe, steps: list[str]) -> None:
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
            _all(conn, f"CREATE SCHEMA IF NOT EXISTS {quote_ident(self.schema)}")
            _all(conn, f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, v VARCHAR)")
            _all(conn, f"INSERT INTO {name} VALUES (1, 'a') ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v")
            _all(conn, f"ALTER TABLE {name} ADD COLUMN w BIGINT")
            _all(conn, f"DROP TABLE {name}")
            probe.passed(steps[1])
        except duckdb.Error as exc:
            probe.failed(steps[1], _first_line(exc), "open the file with the duckdb package and check that it "
                                                     "is writable (not attached read-only, enough disk)")
        finally:
            with suppress(Exception):
                conn.rollback()
            conn.close()


def _missing_parents(path: Path) -> list[Path]:
    """The folders that creating ``path`` would create, outermost first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return list(reversed(missing))




def _probe_folder(probe, name: str, folder: Path) -> bool:
    stem = folder / f"_tp_probe_{uuid.uuid4().hex[:12]}"
    written, renamed = stem.with_suffix(".tmp"), stem.with_suffix(".wal.tmp")
    try:
        written.write_bytes(b"transfer_platform test-connection probe")
        written.rename(renamed)
        renamed.unlink()
    except OSError as exc:
        probe.failed(name, exc.strerror or str(exc), _folder_fix(folder))
        return False
    finally:
        for path in (written, renamed):
            path.unlink(missing_ok=True)
    probe.passed(name)
    return True
