"""How one model's planned windows are grouped into steps: a window holding no row, neighbours
read together in one read (into this process as Arrow), a large window read alone.

Neighbouring windows that read at most ``Tuning.run_rows`` rows in all are read together, in one
Spark job (at most ``Tuning.run_windows`` windows: a union of their reads), or one query of the
source's driver, into this process as Arrow (so this bounds its memory), then committed one by
one; a window that may read more is read alone and staged by Spark's executors (or relayed).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from transfer_platform.sources.base import DriverReads, ReadRequest, SourceReader
from transfer_platform.tuning import Tuning

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: windows asked at once how many rows they hold: the answer is at most this many windows old
#: when a window is read (a row committed meanwhile is found by the next transfer's lookback)
LOOKAHEAD_WINDOWS = 200


def window_rows(reader: SourceReader | DriverReads, spark: SparkSession, reads: list[ReadRequest],
                tuning: Tuning) -> Iterator[int | None]:
    """For each read in turn, how many rows it may hold (up to ``run_rows + 1``; ``None``: not
    known): asked of the source ``LOOKAHEAD_WINDOWS`` windows at a time, just before they are
    moved, so that an empty window costs no Spark job and no staging."""
    for start in range(0, len(reads), LOOKAHEAD_WINDOWS):
        chunk = reads[start:start + LOOKAHEAD_WINDOWS]
        answer = reader.window_rows(spark, chunk, tuning.run_rows + 1)
        yield from answer if answer is not None else [None] * len(chunk)


def steps(sizes: Iterator[int | None], tuning: Tuning) -> Iterator[tuple[str, list[int]]]:
    """How the windows (by index, in order) are moved: ``("empty", [i])`` holds no row,
    ``("together", [i, j, ...])`` neighbours read in one Spark job (``run_rows``, ``run_windows``),
    ``("alone", [i])`` read and staged on its own (large, or of unknown size)."""
    run: list[int] = []
    rows = 0
    most_rows, most_windows = tuning.run_rows, tuning.run_windows
    for i, size in enumerate(sizes):
        if run and (size is None or size == 0 or rows + size > most_rows or len(run) == most_windows):
            yield "together", run
            run, rows = [], 0
        if size == 0:
            yield "empty", [i]
        elif size is None or size > most_rows:
            yield "alone", [i]
        else:
            run.append(i)
            rows += size
    if run:
        yield "together", run


def unknown_steps(windows: int, tuning: Tuning) -> Iterator[tuple[str, list[int]]]:
    """For a source that counts rows with a Spark job: ``("unknown", [i, j, ...])``, up to
    ``run_windows`` neighbours read together up to ``run_rows`` rows; only if they hold more
    are they counted (and moved as :func:`steps` says)."""
    for start in range(0, windows, tuning.run_windows):
        yield "unknown", list(range(start, min(start + tuning.run_windows, windows)))
