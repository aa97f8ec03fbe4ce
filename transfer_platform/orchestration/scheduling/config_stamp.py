"""When a loaded configuration is stale: the file changed, or the store's entries did (a change
through the API touches no file). The processes that keep a loaded configuration (the code
servers' sensor and runs through :class:`~.resources.TransferPlatformResource`, the daemon's run
coordinator) key it on :func:`config_stamp`, so a destination created through the API is scheduled
at the sensor's next tick, without waiting for a reload of the code location."""

from __future__ import annotations

import os
import threading
import time
from functools import lru_cache
from pathlib import Path

#: how long a store's version is trusted before it is asked again (a query of one row)
STORE_STAMP_SECONDS = 2.0
_stamps: dict[str, tuple[float, int, object]] = {}  # path -> (checked at, file mtime, store version)
_stamps_lock = threading.Lock()


def config_stamp(path: str | os.PathLike[str]) -> tuple[int, object]:
    """What, changed, makes a loaded configuration stale: the file's modification time and, when
    the file names a store, the store's version (its entries' count and latest change: a create,
    update or delete through the API changes it, the file does not). Asked at most every
    :data:`STORE_STAMP_SECONDS`; a store that cannot be asked keeps its last version (the loaded
    configuration goes on serving rather than failing every tick)."""
    path = str(path)
    mtime = os.stat(path).st_mtime_ns
    now = time.monotonic()
    with _stamps_lock:
        known = _stamps.get(path)
    if known is not None and known[1] == mtime and now - known[0] < STORE_STAMP_SECONDS:
        return mtime, known[2]
    version = _store_version(path, mtime, known[2] if known is not None else None)
    with _stamps_lock:
        _stamps[path] = (now, mtime, version)
    return mtime, version


def _store_version(path: str, mtime: int, last: object) -> object:
    from transfer_platform.store.database import engine_for
    from transfer_platform.store.resources import store_version

    settings = _store_of(path, mtime)
    if settings is None:
        return None
    try:
        with engine_for(settings.connection).connect() as conn:
            return store_version(conn)
    except Exception:  # noqa: BLE001 - unreachable or not migrated: load_config names it when it matters
        return last


@lru_cache(maxsize=4)
def _store_of(path: str, _mtime_ns: int):  # -> StoreSettings | None
    from transfer_platform.config.parsing import read_file
    from transfer_platform.store.resources import store_settings

    try:
        if not may_name_a_store(Path(path).read_text()):
            return None
        return store_settings(read_file(path)[1], path)
    except Exception:  # noqa: BLE001 - a bad file: load_config reports it
        return None


def may_name_a_store(text: str) -> bool:
    """Whether a configuration file's text may hold a ``store`` key: without the word, and without
    a backslash (an escape in a double-quoted key, the only other way to spell it), it cannot, and
    the file is not parsed for it (a file of 10,000 destinations is ~2.5 s of YAML, which the
    process then parses again to load it)."""
    return "store" in text or "\\" in text


