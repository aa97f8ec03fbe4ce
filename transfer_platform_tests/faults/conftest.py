"""The fault suite's fixtures, and its table of outcomes (``support/faults.py``) printed at the end
of the session: docs/operations.md's "Faults and how the platform recovers" is filled from it."""

from __future__ import annotations

from transfer_platform_tests.support.api import secret_key, store_schema  # noqa: F401 - fixtures
from transfer_platform_tests.support.faults import OUTCOMES
from transfer_platform_tests.support.postgres import dagster_database  # noqa: F401 - a fixture


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not OUTCOMES:
        return
    terminalreporter.section("faults and how the platform recovers")
    terminalreporter.write_line("| Fault | Path | Outcome | Time to recover |")
    terminalreporter.write_line("|---|---|---|---|")
    for row in OUTCOMES:
        terminalreporter.write_line("| " + " | ".join(row) + " |")
