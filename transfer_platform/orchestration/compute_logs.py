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
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from typing import Any

from transfer_platform.orchestration import dagster_internals as internals

internals.require("compute_logs")  # a Dagster without what it uses: named when the instance loads


class FileComputeLogManager(internals.LOCAL_COMPUTE_LOGS.get()):
    """``LocalComputeLogManager`` (its configuration: ``base_dir``, ``polling_timeout``) whose
    capture redirects a step's output to its files without mirroring it (see the module)."""

    @classmethod
    def config_type(cls) -> dict:
        from dagster import Field, StringSource

        return {**super().config_type(), "base_dir": Field(
            StringSource, is_required=False,
            description="Where the files go (default: $DAGSTER_HOME/storage, as Dagster's own manager)")}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: dict) -> FileComputeLogManager:
        base_dir = config_value.get("base_dir") or os.path.join(os.environ.get("DAGSTER_HOME", "."), "storage")
        return cls(inst_data=inst_data, **{**config_value, "base_dir": base_dir})

    @contextmanager
    def capture_logs(self, log_key: Sequence[str]) -> Generator[Any, None, None]:
        io_type, extension = internals.IO_TYPES.get(), internals.IO_EXTENSIONS.get()
        redirect, ensure_file = internals.REDIRECT_TO_FILE.get(), internals.FILE_UTILS.get()
        out = self.get_captured_local_path(log_key, extension[io_type.STDOUT])
        err = self.get_captured_local_path(log_key, extension[io_type.STDERR])
        ensure_file(out)
        ensure_file(err)
        with redirect(sys.stdout, out), redirect(sys.stderr, err):
            yield internals.CAPTURED_CONTEXT.get()(log_key)
        internals.TOUCH_FILE.get()(self.complete_artifact_path(log_key))
