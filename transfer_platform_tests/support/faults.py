"""The fault suite's table (transfer_platform_tests/faults/): each test adds a row (the fault, the
path it hit, what the platform did, how long the next transfer took to deliver exactly); the
suite's conftest prints the rows at the end of the session, as docs/operations.md's "Faults and
how the platform recovers" shows them."""

from __future__ import annotations

OUTCOMES: list[tuple[str, str, str, str]] = []


def record(fault: str, path: str, outcome: str, recovered_in: float | None) -> None:
    """One row: ``recovered_in`` the seconds from the fault healed (or the process killed) to the
    next transfer having delivered exactly (None: not measured)."""
    OUTCOMES.append((fault, path, outcome, "-" if recovered_in is None else f"{recovered_in:.1f} s"))
