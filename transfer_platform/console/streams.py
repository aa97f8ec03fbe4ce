"""Where child processes write: a local Spark's JVM (its start-up banner, its log, Java stack
traces) and Dagster's code server inherit this process's stdout and stderr when they start, and
keep them for their whole life. :func:`child_output` points both elsewhere while such a child
starts, so that stdout holds only what the command prints (a JSON summary, a transfer id) and the
terminal only what the user asked for."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO


class ChildOutput:
    """What the children started in a :func:`child_output` block wrote (an unlinked temporary
    file: it is gone when this process ends)."""

    def __init__(self, file: BinaryIO | None) -> None:
        self._file = file

    def tail(self, lines: int = 3) -> list[str]:
        """The last non-empty lines written so far (none when the output went to stderr)."""
        if self._file is None:
            return []
        self._file.flush()
        size = os.fstat(self._file.fileno()).st_size
        with open(self._file.fileno(), "rb", closefd=False) as reader:
            reader.seek(max(0, size - 16_384))
            text = reader.read().decode(errors="replace")
        return [line.strip() for line in text.splitlines() if line.strip()][-lines:]


@contextmanager
def child_output(verbose: bool) -> Iterator[ChildOutput]:
    """While the block runs, this process's stdout and stderr (file descriptors 1 and 2) point at
    a temporary file, or with ``verbose`` stdout points at stderr (which is left alone); a child
    process started in the block keeps them. Afterwards both are put back."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    file = None if verbose else tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the children
    try:
        if file is None:
            os.dup2(2, 1)
        else:
            os.dup2(file.fileno(), 1)
            os.dup2(file.fileno(), 2)
        yield ChildOutput(file)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
