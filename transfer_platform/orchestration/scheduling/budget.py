"""The time a sensor tick may spend, and what it left for the next tick.

Dagster fails a sensor evaluation that takes longer than its gRPC timeout (60 s by default,
``DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS``), which would lose the whole tick: its requests and its
cursor. So the ``transfer_schedule`` sensor works within a budget
(``TRANSFER_PLATFORM_SENSOR_BUDGET_SECONDS``, 40 s by default): once it is spent, what is still
to do is left as it was (no request, its cursor entry untouched, a swept run not tagged), counted,
logged, and done by the next tick, which starts where the work is (what was done is no longer due).
"""

import os
import time
import warnings
from collections import Counter
from collections.abc import Callable

BUDGET_ENV = "TRANSFER_PLATFORM_SENSOR_BUDGET_SECONDS"
DEFAULT_BUDGET_SECONDS = 40.0


def configured_seconds() -> float:
    """``TRANSFER_PLATFORM_SENSOR_BUDGET_SECONDS``, or the default when unset or not a number
    (a typo must not fail every tick; it is named in a warning)."""
    raw = os.environ.get(BUDGET_ENV, "").strip()
    if not raw:
        return DEFAULT_BUDGET_SECONDS
    try:
        return float(raw)
    except ValueError:
        warnings.warn(f"{BUDGET_ENV}={raw!r} is not a number of seconds; using {DEFAULT_BUDGET_SECONDS:g} "
                      f"(set it to e.g. 40)", stacklevel=2)
        return DEFAULT_BUDGET_SECONDS


class Budget:
    def __init__(self, seconds: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = configured_seconds() if seconds is None else seconds
        self.clock = clock
        self.deadline = clock() + self.seconds
        self.left: Counter[str] = Counter()

    def spent(self) -> bool:
        return self.clock() >= self.deadline

    def leave(self, what: str, count: int = 1) -> None:
        """``count`` things (``what``: their kind, e.g. ``"transfer"``) left for the next tick."""
        self.left[what] += count

    def summary(self) -> str | None:
        """What was left, in a sentence; None when nothing was."""
        if not self.left:
            return None
        parts = ", ".join(f"{count} {what}" for what, count in sorted(self.left.items()))
        return (f"the sensor's time budget of {self.seconds:g} s was spent; left for the next tick: "
                f"{parts} (set {BUDGET_ENV} to change the budget)")


#: no limit (the functions' default when called outside the sensor)
def unlimited() -> Budget:
    return Budget(float("inf"))
