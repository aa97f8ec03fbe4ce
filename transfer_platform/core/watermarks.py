"""Watermarks: per destination and model, what has been delivered so far.

Two values are kept apart (as Airbyte's cursor keeps "largest seen" apart from "safe to commit"):

- ``watermark``: the end of the first unbroken run of finished windows, counted from the model's
  configured start. Every row with a last-modified value before it has been read at least once.
  The next transfer reads from ``watermark - lookback``. It is never later than the "now" of the
  run that committed it, because a window's progress is clipped to that "now".
- ``high_watermark``: the largest last-modified value delivered, used for
  ``delta_rows_transferred`` and ``most_recent_last_updated_at``.

Finished windows are stored as merged half-open intervals, so windows materialized out of order
(a UI backfill, a retry of window k) still add up to one watermark. Epoch 0 is a real value:
"unset" is ``None``, never a falsy number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime

from transfer_platform.core.timeutil import from_epoch_us, to_epoch_us
from transfer_platform.core.windows import Window


def merge_windows(windows: list[Window] | tuple[Window, ...]) -> tuple[Window, ...]:
    """Union of half-open windows: sorted, touching or overlapping ones joined."""
    merged: list[Window] = []
    for window in sorted(windows):
        if merged and window.start <= merged[-1].end:
            last = merged[-1]
            if window.end > last.end:
                merged[-1] = Window(last.start, window.end)
        else:
            merged.append(window)
    return tuple(merged)


def first_unbroken_end(completed: tuple[Window, ...], configured_start: datetime) -> datetime | None:
    """End of the finished run that covers ``configured_start``; ``None`` if there is none."""
    for window in completed:
        if window.start <= configured_start < window.end:
            return window.end
    return None


@dataclass(frozen=True)
class ModelState:
    """What a destination holds for one model (stored with its data, in the same commit)."""

    watermark: datetime | None = None
    high_watermark: datetime | None = None
    completed: tuple[Window, ...] = field(default_factory=tuple)

    def after_window(
        self, progress: Window, *, batch_max_last_modified: datetime | None, configured_start: datetime
    ) -> ModelState:
        """The state once ``progress`` (already clipped to the run's "now") has committed."""
        completed = merge_windows((*self.completed, progress))
        high = self.high_watermark
        if batch_max_last_modified is not None and (high is None or batch_max_last_modified > high):
            high = batch_max_last_modified
        return ModelState(
            watermark=first_unbroken_end(completed, configured_start),
            high_watermark=high,
            completed=completed,
        )

    def reset(self) -> ModelState:
        """A full refresh forgets progress (the high watermark goes too: every row is new)."""
        return replace(self, watermark=None, high_watermark=None, completed=())

    # -- serialization (a JSON text column in PostgreSQL, commit metadata in Delta) -------------

    def to_json(self) -> str:
        return json.dumps(
            {
                "watermark_us": None if self.watermark is None else to_epoch_us(self.watermark),
                "high_watermark_us": (
                    None if self.high_watermark is None else to_epoch_us(self.high_watermark)
                ),
                "completed_us": [[to_epoch_us(w.start), to_epoch_us(w.end)] for w in self.completed],
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | None) -> ModelState:
        if not text:
            return cls()
        data = json.loads(text)
        wm, high = data.get("watermark_us"), data.get("high_watermark_us")
        return cls(
            watermark=None if wm is None else from_epoch_us(wm),
            high_watermark=None if high is None else from_epoch_us(high),
            completed=tuple(
                Window(from_epoch_us(s), from_epoch_us(e)) for s, e in data.get("completed_us", [])
            ),
        )
