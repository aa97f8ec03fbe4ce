"""A step's captured stdout and stderr, written to its files only: ``compute_logs`` of
``deploy/dagster.production.yaml``.

Dagster's ``LocalComputeLogManager`` keeps each step's stdout and stderr in files under
``base_dir`` (the UI's *stdout* / *stderr* of a step) and also mirrors them back onto the run
worker's own streams (the daemon's output) through a ``tail -F`` process per stream, started and
waited for at every step: ~0.05 s of a small transfer's run, two processes per step, and every
run's output repeated in the daemon's log (at 4,000 runs an hour, most of that log).
:class:`FileComputeLogManager` is the same manager (same files, same UI) without the mirror. Under
``dagster dev`` (the shipped ``dagster.yaml``) Dagster's own manager stays, so a run's output also
shows in the terminal.

On a Dagster lacking a private name it uses (:mod:`~transfer_platform.orchestration.speed.dagster_internals`)
it is Dagster's own manager, with one warning: the capture is Dagster's (the ``tail`` mirror) when
only the capture's names are gone; when ``LocalComputeLogManager`` itself is gone, the instance
gets the manager Dagster itself gives a fresh instance, configured as this one was.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from typing import Any

import dagster

from transfer_platform.orchestration.speed import dagster_internals as internals


def _dagsters_default() -> type:
    """The compute log manager class Dagster gives a fresh local instance (public API only)."""
    with tempfile.TemporaryDirectory() as home, dagster.DagsterInstance.local_temp(home) as instance:
        return type(instance.compute_log_manager)


#: the base of FileComputeLogManager: Dagster's LocalComputeLogManager, or (a Dagster without it,
#: warned when the manager is configured) Dagster's default manager
_BASE: type = (internals.LOCAL_COMPUTE_LOGS.get() if internals.LOCAL_COMPUTE_LOGS.problem() is None
               else _dagsters_default())


class FileComputeLogManager(_BASE):
    """``LocalComputeLogManager`` (its configuration: ``base_dir``, ``polling_timeout``) whose
    capture redirects a step's output to its files without mirroring it (see the module)."""

    @classmethod
    def config_type(cls) -> dict:
        from dagster import Field, StringSource

        return {**super().config_type(), "base_dir": Field(
            StringSource, is_required=False,
            description="Where the files go (default: $DAGSTER_HOME/storage, as Dagster's own manager)")}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: dict) -> Any:  # a compute log manager
        base_dir = config_value.get("base_dir") or os.path.join(os.environ.get("DAGSTER_HOME", "."), "storage")
        if internals.fallback("compute_logs") and internals.LOCAL_COMPUTE_LOGS.problem() is not None:
            return _BASE.from_config_value(inst_data, {**config_value, "base_dir": base_dir})
        return cls(inst_data=inst_data, **{**config_value, "base_dir": base_dir})

    @contextmanager
    def capture_logs(self, log_key: Sequence[str]) -> Generator[Any, None, None]:
        if internals.fallback("compute_logs"):  # Dagster's own capture, with its mirror
            with super().capture_logs(log_key) as context:
                yield context
            return
        # the extensions by Dagster's IO type, an enum of the values "stdout" and "stderr"
        extension = {io_type.value: ext for io_type, ext in internals.IO_EXTENSIONS.get().items()}
        redirect = internals.REDIRECT_TO_FILE.get()
        out = self.get_captured_local_path(log_key, extension["stdout"])
        err = self.get_captured_local_path(log_key, extension["stderr"])
        _touch(out)
        _touch(err)
        with redirect(sys.stdout, out), redirect(sys.stderr, err):
            yield internals.CAPTURED_CONTEXT.get()(log_key)
        _touch(self.complete_artifact_path(log_key))  # the capture is complete: the UI stops following


def _touch(path: str) -> None:
    """``path`` created (with its folder) if missing, its time now: as Dagster's own capture does."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a"):
        os.utime(path, None)
