"""A destination on the local file system (a Delta table's folder, an Iceberg warehouse, a DuckDB
file's folder): the folders creating it would create, the fix a refused one prints, and the
probe of the rights a transfer needs there."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from transfer_platform.probes import current_user

if TYPE_CHECKING:
    from transfer_platform.probes import Probe


def missing_parents(path: Path) -> list[Path]:
    """The folders that creating ``path`` would create, outermost first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return list(reversed(missing))


def folder_fix(folder: Path) -> str:
    """What lets the user transfers run as write in ``folder`` (or its parent, if it is missing)."""
    parent = folder if folder.exists() else folder.parent
    user = current_user()
    return (f"let the user transfers run as ({user}) create, write and delete in {parent} "
            f"(chown {user} {parent}, or chmod u+rwx on it), or point connection.path elsewhere")


def probe_folder(probe: Probe, folder: Path, name: str | None = None) -> bool:
    """Write, rename, read and delete a file and create and remove a folder in ``folder``, as a
    transfer does; the check ``name`` passes or fails (whether it passed)."""
    name = name or f"write, rename, read and delete files and folders in {folder}"
    stem = folder / f"_tp_probe_{uuid.uuid4().hex[:12]}"
    written, renamed, sub = stem.with_suffix(".tmp"), stem.with_suffix(".json.tmp"), stem.with_suffix(".d")
    try:
        written.write_bytes(b"transfer_platform test-connection probe")
        written.rename(renamed)
        renamed.read_bytes()
        renamed.unlink()
        sub.mkdir()
        sub.rmdir()
    except OSError as exc:
        probe.failed(name, exc.strerror or str(exc), folder_fix(folder))
        return False
    finally:
        for path in (written, renamed):
            path.unlink(missing_ok=True)
        if sub.is_dir():
            sub.rmdir()
    probe.passed(name)
    return True
