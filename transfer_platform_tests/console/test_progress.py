"""Progress on stderr: the line's arithmetic, plain lines on a pipe (with a heartbeat while a
window takes long), a bar on a terminal."""

from __future__ import annotations

import io
import os
import select
import threading
import time

import pytest

from transfer_platform.console.progress import (
    BarProgress,
    PlainProgress,
    clock,
    progress_for,
    progress_line,
)


@pytest.mark.parametrize(("args", "line"), [
    (("events", 120, 335, 2400, 45.0), "events 120/335 windows, 2,400 rows, 0:45, ~1:20 left"),
    (("events", 0, 335, 0, 3.0), "events 0/335 windows, 0 rows, 0:03"),
    (("events", 335, 335, 6700, 125.0), "events 335/335 windows, 6,700 rows, 2:05, done"),
    (("events", 0, 0, 0, 0.2), "events 0/0 windows, 0 rows, 0:00, done"),
    (("big", 1, 4, 10, 3700.0), "big 1/4 windows, 10 rows, 1:01:40, ~3:05:00 left"),
], ids=["under-way", "nothing-done-no-estimate", "done", "nothing-to-do", "hours"])
def test_progress_line(args: tuple, line: str) -> None:
    assert progress_line(*args) == line


@pytest.mark.parametrize(("seconds", "text"), [(0, "0:00"), (59.9, "0:59"), (61, "1:01"), (3600, "1:00:00"),
                                               (-3, "0:00")])
def test_clock(seconds: float, text: str) -> None:
    assert clock(seconds) == text


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_at_most_one_a_second_and_the_last_one_always() -> None:
    stream, now = io.StringIO(), FakeClock()
    progress = PlainProgress(stream, now=now, heartbeat=3600)
    progress.planned("events", 4)
    for step in (0.1, 0.2, 1.5, 1.6):  # windows commit at these times
        now.now = step
        progress.advanced("events", 10)
    progress.close()
    assert stream.getvalue().splitlines() == [
        "events 0/4 windows, 0 rows, 0:00",
        "events 3/4 windows, 30 rows, 0:01, ~0:00 left",
        "events 4/4 windows, 40 rows, 0:01, done",
    ]


def test_a_line_every_few_seconds_while_a_window_takes_long() -> None:
    """Nothing commits, yet lines keep coming (a long backfill window, a slow COUNT)."""

    class Lines(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.arrived = threading.Condition()

        def flush(self) -> None:
            with self.arrived:
                self.arrived.notify_all()

    stream = Lines()
    progress = PlainProgress(stream, heartbeat=0.05)
    progress.planned("events", 2)
    with stream.arrived:
        assert stream.arrived.wait_for(lambda: len(stream.getvalue().splitlines()) >= 3, timeout=30)
    progress.close()
    assert all(line.startswith("events 0/2 windows, 0 rows") for line in stream.getvalue().splitlines())


def test_a_terminal_gets_a_bar_and_a_pipe_plain_lines() -> None:
    assert isinstance(progress_for(io.StringIO()), PlainProgress)
    main, other = os.openpty()
    try:
        with open(other, "w", closefd=False) as terminal:
            progress = progress_for(terminal)
            assert isinstance(progress, BarProgress)
            progress.planned("events", 2)
            progress.advanced("events", 5)
            progress.advanced("events", 5)
            progress.close()
        shown = ""
        deadline = time.monotonic() + 10
        waiting = select.poll()  # not select: a test session's descriptors go above its 1024
        waiting.register(main, select.POLLIN)
        while "2/2" not in shown and time.monotonic() < deadline:  # the terminal's bytes, as they come
            if waiting.poll(1000):
                shown += os.read(main, 65536).decode(errors="replace")
    finally:
        os.close(main)
        os.close(other)
    assert "events" in shown
    assert "2/2" in shown
    assert "10 rows" in shown
