"""The speed kit: what the platform adds to Dagster to start runs sooner and load large code
locations faster, and the fixes of Dagster's behaviour it needs, behind the fence of Dagster's
private names.

- ``dagster_internals``: the fence, the one door to Dagster's private names (the upgrade
  checklist, the fallbacks, their budget);
- ``dagster_fixes``: Dagster's behaviour fixed or saved (the epoch tick, the ``dagster dev`` stop,
  the asset graph in linear time, the snapshot made once, the daemon's refresh skipped);
- ``launcher`` and ``run_worker``: runs forked from a preloaded parent (``dagster.yaml``'s
  ``run_launcher``);
- ``queue_wake``: the run queue passed over as soon as a run is queued or ends;
- ``compute_logs``: a step's output captured in its files, without Dagster's mirror.

The definitions reach it through :func:`install` alone; the instance's parts (the launcher, the
compute-log manager) are named in ``dagster.yaml``, and the run coordinator installs the daemon's.
Importing the package changes nothing of Dagster or of the process.
"""

from __future__ import annotations

import gc

from transfer_platform.orchestration.speed import dagster_fixes, dagster_internals

#: new objects between two of the garbage collector's young collections in a process that builds
#: the definitions (Python's default: 700). A code location of 1,000 recipients x 10 models makes
#: millions of objects while it builds its definitions and their snapshot; at 700 the collections
#: cost 2-3 of its ~18 CPU-seconds (``benchmarks.code_location``), at 20,000 less than one.
GC_YOUNG_THRESHOLD = 20_000


def install() -> None:
    """The speed kit in a process that builds the definitions (the code server, the run workers'
    parent), once per process whatever the number of calls: the garbage collector's young
    threshold raised for the load and every snapshot; Dagster's fixes (the epoch tick, the asset
    graph, the snapshot made once, runs cancelled when ``dagster dev`` stops); and one warning
    naming what this Dagster lacks of what the sensor uses (its repairs)."""
    collect_less()
    dagster_fixes.install()
    dagster_internals.fallback("repair")  # warns once when this Dagster lacks its names


def collect_less() -> None:
    """Raise the garbage collector's young threshold to :data:`GC_YOUNG_THRESHOLD` (never lower it)."""
    young, middle, old = gc.get_threshold()
    if 0 < young < GC_YOUNG_THRESHOLD:
        gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
