"""``python -m transfer_platform.dagster_dev [options of dagster dev]``: ``dagster dev`` that stops
on SIGTERM and SIGINT however it was started.

Dagster 1.13's command line maps SIGTERM onto SIGINT's handler
(``dagster._utils.interrupts.setup_interrupt_handlers``). A process started with SIGINT ignored
keeps it ignored: every background job of a script (``dagster dev ... &`` in a non-interactive
shell, which is how tools and CI start it) and every child of a process that ignores it. Such a
``dagster dev`` ignored SIGTERM as well, and SIGINT: it never stopped, its webserver, daemon and
code servers (told to stop by an interrupt they ignored too) with it, and all had to be killed.

This puts SIGINT's default back if it was ignored, then becomes ``dagster dev`` (``exec``: same
process, same arguments, the process tree of a plain ``dagster dev``), so SIGTERM or SIGINT stops
it and everything it started; :mod:`transfer_platform.orchestration.speed.dagster_fixes` cancels a
transfer still running then. Nothing else differs from ``dagster dev``.
"""

from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # exec keeps an ignored signal ignored, resets the rest
    os.execv(sys.executable, [sys.executable, "-m", "dagster", "dev", *sys.argv[1:]])


if __name__ == "__main__":
    main()
