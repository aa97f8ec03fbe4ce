"""The fault suite's shared pieces: the table of outcomes each test adds a row to (printed at the
end of the session: docs/operations.md's "Faults and how the platform recovers" is filled from it).
"""

from __future__ import annotations

import pytest

from transfer_platform_tests.support.api import secret_key, store_schema  # noqa: F401 - fixtures
from transfer_platform_tests.support.postgres import dagster_database  # noqa: F401 - a fixture

OUTCOMES: list[tuple[str, str, str, str]] = []


def record(fault: str, path: str, outcome: str, recovered_in: float | None) -> None:
    """One row of the table: the fault, the path it hit, what the platform did, the seconds from
    healing the fault to the next transfer having delivered exactly (None: not measured)."""
    OUTCOMES.append((fault, path, outcome, "-" if recovered_in is None else f"{recovered_in:.1f} s"))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not OUTCOMES:
        return
    terminalreporter.section("faults and how the platform recovers")
    terminalreporter.write_line("| Fault | Path | Outcome | Time to recover |")
    terminalreporter.write_line("|---|---|---|---|")
    for row in OUTCOMES:
        terminalreporter.write_line("| " + " | ".join(row) + " |")


@pytest.fixture
def outcomes() -> list:
    return OUTCOMES
