"""The ``transfer-platform`` executable (the package's entry point): a command forwarded to the
resident command process (:mod:`transfer_platform.runtime.resident`) when one of this code listens,
else run here by the command line (:func:`transfer_platform.cli.main`).

The command line gives the resident process what it runs (:data:`COMMAND`); the runtime imports
nothing of it. Until a command runs here, this imports the standard library only.
"""

from __future__ import annotations

import sys

from transfer_platform.runtime import resident


def run_here(argv: list[str]) -> int:
    """The command line's ``main``, in this process."""
    from transfer_platform.cli import main

    return main(argv)


#: what a resident process runs (the command line's main) and imports before it forks
COMMAND = resident.Command(
    pointer="transfer_platform.executable:COMMAND", run=run_here,
    warm=("transfer_platform.cli", "transfer_platform.transfers.entry", "transfer_platform.transfers.runner",
          "transfer_platform.runtime.spark_session", "transfer_platform.runtime.shared_spark",
          "transfer_platform.console.progress", "pyspark.sql.connect.session", "pyarrow", "pyarrow.parquet",
          "pandas"))


def main() -> int:
    """The ``transfer-platform`` command: served by the resident process when one of this code
    listens, else run here (having started one for the next commands)."""
    argv = sys.argv[1:]
    code = resident.forward(argv, COMMAND)
    return run_here(argv) if code is None else code
