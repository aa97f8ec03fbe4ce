"""The Dagster side, in its parts: ``catalog`` (the assets, their checks, keys, partitions,
resources and what a transfer reports), ``jobs`` (the transfer, delete-sweep and test-connection
jobs), ``scheduling`` (the schedule sensor, the run coordinator, run tags and limits), ``runs``
(runs as users see them: their lifecycle, enqueue, list and cancel), ``instance`` (Dagster's
storage and its retention) and ``speed`` (the speed kit, behind the fence of Dagster's private
names).

Importing it changes nothing of Dagster: the fixes of ``speed.dagster_fixes`` are installed by what
needs them (the definitions through ``speed.install``, the partitions, the run coordinator), and
Dagster's private names are reached through ``speed.dagster_internals`` only. A ``dagster.yaml``
written before these parts names its classes by their former paths (:data:`FORMER_PATHS`), which
still load.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

#: the modules a ``dagster.yaml`` names (its run coordinator, run launcher, compute-log manager,
#: storage), by the path they had before ``orchestration/`` had its parts: a file written then
#: still loads, each former name standing for the module's names where it is now
FORMER_PATHS = {
    f"{__name__}.coordinator": f"{__name__}.scheduling.coordinator",
    f"{__name__}.launcher": f"{__name__}.speed.launcher",
    f"{__name__}.compute_logs": f"{__name__}.speed.compute_logs",
    f"{__name__}.sqlite_storage": f"{__name__}.instance.sqlite_storage",
}


class _FormerPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a name of :data:`FORMER_PATHS` only (every other import is left to Python's own
    finders), as a module holding the names of the module where it is now."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(fullname, self) if fullname in FORMER_PATHS else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # Python's own module object

    def exec_module(self, module: ModuleType) -> None:
        now = importlib.import_module(FORMER_PATHS[module.__name__])
        module.__dict__.update({k: v for k, v in vars(now).items() if not k.startswith("__")})


if not any(isinstance(finder, _FormerPaths) for finder in sys.meta_path):
    sys.meta_path.append(_FormerPaths())
