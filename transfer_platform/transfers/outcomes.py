"""What a transfer reports: each committed window's outcome, a partition's added up, and a
model's summary as the command line, the demo and Dagster's materializations show it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transfer_platform.core.planning import PlannedWindow
from transfer_platform.core.timeutil import isoformat
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.destinations.base import WindowResult


@dataclass(frozen=True)
class WindowOutcome:
    planned: PlannedWindow
    result: WindowResult
    partition_key: str | None
    into_refresh: bool = False  # committed to a table built aside, live once the refresh publishes


class PartitionTally:
    """Adds up the reads of one partition (a partition below the one-minute grid is moved in
    chunks) so that its materialization reports the whole partition, not its last chunk."""

    def __init__(self) -> None:
        self._open: list[WindowOutcome] = []

    def add(self, outcome: WindowOutcome) -> WindowOutcome | None:
        """The partition's combined outcome once its last read has committed, else None."""
        self._open.append(outcome)
        if not outcome.planned.last_of_partition:
            return None
        parts, self._open = self._open, []
        if len(parts) == 1:
            return outcome
        first, last = parts[0], parts[-1]
        highest = [p.result.max_last_modified for p in parts if p.result.max_last_modified is not None]
        result = WindowResult(
            rows_transferred=sum(p.result.rows_transferred for p in parts),
            delta_rows_transferred=sum(p.result.delta_rows_transferred for p in parts),
            volume_bytes=sum(p.result.volume_bytes for p in parts),
            max_last_modified=max(highest) if highest else None,
            state=last.result.state,
            rows_deleted=sum(p.result.rows_deleted for p in parts),
            versions_superseded=sum(p.result.versions_superseded for p in parts),
        )
        bounds = ReadBounds(first.planned.bounds.lower, last.planned.bounds.upper,
                            Window(first.planned.bounds.progress.start, last.planned.bounds.progress.end))
        planned = PlannedWindow(last.planned.partition, bounds, True)
        return WindowOutcome(planned, result, last.partition_key, last.into_refresh)


@dataclass
class ModelSummary:
    """Per-model metrics of one transfer, as the CLI prints them."""

    model: str
    status: str = "SUCCESS"
    windows: int = 0
    rows_transferred: int = 0
    delta_rows_transferred: int = 0
    rows_deleted: int = 0
    versions_superseded: int = 0
    volume_bytes: int = 0
    state: ModelState | None = None
    error: str | None = None
    error_type: str | None = None
    blame: str | None = None

    def add(self, outcome: WindowOutcome) -> None:
        self.windows += 1
        self.rows_transferred += outcome.result.rows_transferred
        self.delta_rows_transferred += outcome.result.delta_rows_transferred
        self.rows_deleted += outcome.result.rows_deleted
        self.versions_superseded += outcome.result.versions_superseded
        self.volume_bytes += outcome.result.volume_bytes
        self.state = outcome.result.state

    def fail(self, exc: BaseException) -> None:
        self.status = "ERROR"
        self.error = str(exc)
        self.error_type = type(exc).__name__
        self.blame = getattr(exc, "blame", None)

    def as_dict(self) -> dict[str, Any]:
        state = self.state
        return {
            "model": self.model,
            "status": self.status,
            "windows": self.windows,
            "rows_transferred": self.rows_transferred,
            "delta_rows_transferred": self.delta_rows_transferred,
            "rows_deleted": self.rows_deleted,
            "versions_superseded": self.versions_superseded,
            "volume_transferred_in_mb": round(self.volume_bytes / 1_048_576, 3),
            "watermark": isoformat(state.watermark) if state else None,
            "most_recent_last_updated_at": isoformat(state.high_watermark) if state else None,
            "error": self.error,
        }
