"""Structured logs: one JSON line per phase of a model's transfer.

Phases: ``plan``, ``read``, ``versions`` (rows of a key left out of a window because a later
version, or an identical copy, was delivered), ``stage``, ``load`` (merge + watermark commit), ``publish`` (a full
refresh swapped in), ``clean up`` (staging dropped), ``schema`` (columns added or dropped),
``stream`` (a warning: a small window's stream from the source failed before its commit, so the
window is read again), ``error``. Every line carries ``transfer_id``, ``destination`` and
``model``; values are counts, times and names, never connection settings, so no secret can reach
a log.

Lines go to the Python logger ``transfer_platform.phases`` (``dagster.yaml`` hands the
``transfer_platform`` loggers to Dagster, so they show in the run's logs in the UI) or, for the
runner, to the Dagster step logger of the run.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

LOGGER = logging.getLogger("transfer_platform.phases")
PHASES = ("plan", "read", "versions", "stage", "load", "publish", "clean up", "schema", "stream", "error")


def phase_line(phase: str, *, transfer_id: str, destination: str, model: str, **fields: Any) -> str:
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    record = {"phase": phase, "transfer_id": transfer_id, "destination": destination, "model": model}
    record.update({k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in fields.items()})
    return json.dumps(record, default=str, sort_keys=False)


def log_phase(phase: str, *, transfer_id: str, destination: str, model: str, sink: Any = None,
              level: int = logging.INFO, **fields: Any) -> None:
    """Write one phase line to ``sink`` (a Dagster or Python logger; default ``LOGGER``)."""
    target = LOGGER if sink is None else sink
    line = phase_line(phase, transfer_id=transfer_id, destination=destination, model=model, **fields)
    if level >= logging.ERROR:
        target.error(line)
    elif level >= logging.WARNING:
        target.warning(line)
    else:
        target.info(line)
