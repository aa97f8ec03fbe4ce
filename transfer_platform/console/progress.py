"""Progress of a transfer (or a dry run) on stderr, per model: windows done of total, rows,
elapsed time and an estimate of what is left.

A terminal gets a progress bar per model (``rich``); anything else (a pipe, a file, a CI log)
gets plain lines: one when a model's windows are planned, one as windows commit (at most one a
second), one every few seconds while nothing commits (a long window), and the last one when the
model ends. The transfer core knows nothing of this: the command line hands
:meth:`Progress.planned` and :meth:`Progress.advanced` to it as callbacks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TextIO


def clock(seconds: float) -> str:
    """``0:45``, ``12:03``, ``1:02:03``."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def progress_line(label: str, done: int, total: int, rows: int, elapsed: float, *, what: str = "windows") -> str:
    """``events 120/335 windows, 2,400 rows, 0:45, ~1:20 left`` (``done`` when all are done; no
    estimate before the first window)."""
    line = f"{label} {done:,}/{total:,} {what}, {rows:,} rows, {clock(elapsed)}"
    if done >= total:
        return f"{line}, done"
    if done:
        return f"{line}, ~{clock(elapsed / done * (total - done))} left"
    return line


class Progress(Protocol):
    def planned(self, model: str, windows: int) -> None:
        """``model``'s windows are planned; none is done yet."""

    def advanced(self, model: str, rows: int) -> None:
        """One more window of ``model`` is done, with ``rows`` rows."""

    def close(self) -> None:
        """The work is over (every model ended, or failed)."""


@dataclass
class _Model:
    total: int
    started: float
    done: int = 0
    rows: int = 0
    shown: float = field(default=0.0)  # when its last line was written


class PlainProgress:
    """Plain lines on ``stream`` (see the module's doc)."""

    def __init__(self, stream: TextIO, *, what: str = "windows", label: Callable[[str], str] = str,
                 every: float = 1.0, heartbeat: float = 5.0, now: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.what, self.label = stream, what, label
        self.every, self.heartbeat, self.now = every, heartbeat, now
        self._models: dict[str, _Model] = {}
        self._current: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def planned(self, model: str, windows: int) -> None:
        with self._lock:
            self._models[model] = _Model(total=windows, started=self.now())
            self._current = model
            self._show(model)
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._ticker.start()

    def advanced(self, model: str, rows: int) -> None:
        with self._lock:
            state = self._models.get(model)
            if state is None:
                return
            state.done += 1
            state.rows += rows
            if state.done >= state.total or self.now() - state.shown >= self.every:
                self._show(model)

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()

    def _show(self, model: str) -> None:
        state = self._models[model]
        state.shown = self.now()
        self.stream.write(progress_line(self.label(model), state.done, state.total, state.rows,
                                        state.shown - state.started, what=self.what) + "\n")
        self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(min(1.0, self.heartbeat)):
            with self._lock:
                model = self._current
                state = self._models.get(model) if model else None
                if state is not None and state.done < state.total and self.now() - state.shown >= self.heartbeat:
                    self._show(model)


class BarProgress:
    """A ``rich`` progress bar per model on ``stream`` (a terminal)."""

    def __init__(self, stream: TextIO, *, what: str = "windows", label: Callable[[str], str] = str) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        self.label = label
        self._bars = RichProgress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn(what + ", {task.fields[rows]:,} rows"), TimeElapsedColumn(), TextColumn("~"),
            TimeRemainingColumn(), TextColumn("left"),
            console=Console(file=stream), redirect_stdout=False, redirect_stderr=True)
        self._tasks: dict[str, int] = {}
        self._rows: dict[str, int] = {}

    def planned(self, model: str, windows: int) -> None:
        if not self._tasks:
            self._bars.start()
        self._rows[model] = 0
        self._tasks[model] = self._bars.add_task(self.label(model), total=windows, rows=0)

    def advanced(self, model: str, rows: int) -> None:
        if model in self._tasks:
            self._rows[model] += rows
            self._bars.update(self._tasks[model], advance=1, rows=self._rows[model])

    def close(self) -> None:
        if self._tasks:
            self._bars.stop()


def progress_for(stream: TextIO, *, what: str = "windows", label: Callable[[str], str] = str) -> Progress:
    """A bar on a terminal, plain lines elsewhere."""
    if stream.isatty():
        return BarProgress(stream, what=what, label=label)
    return PlainProgress(stream, what=what, label=label)
