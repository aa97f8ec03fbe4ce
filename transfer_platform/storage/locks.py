"""A model's lock in a destination folder: one transfer (or delete sweep) of a model at a time,
however it was started (two CLI processes, ``materialize()`` outside the run queue).

An exclusive ``flock`` on ``<folder>/<model>.lock``, the operating system's: released when the
writer closes, or when its process dies (no stale lock after a crash). A second transfer waits up
to ``wait_seconds``, then is refused naming the first: the file says who holds it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path

from transfer_platform.errors import TransferRunning


class FolderLocks:
    """The model locks one writer holds, each an open lock file, until :meth:`release_all`."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}  # model -> its open lock file

    def acquire(self, folder: Path, model: str, transfer_id: str, *, destination: str,
                wait_seconds: float) -> None:
        if model in self._held:
            return
        folder.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(folder / f"{model}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(descriptor, 4096, 0).decode(errors="replace")
                    os.close(descriptor)
                    raise TransferRunning(running_message(model, destination, holder)) from None
                time.sleep(0.1)
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, holder_text(transfer_id).encode(), 0)
        self._held[model] = descriptor

    def release_all(self) -> None:
        for descriptor in self._held.values():
            with suppress(OSError):
                os.close(descriptor)  # closing the file releases its flock
        self._held.clear()

    def __bool__(self) -> bool:
        return bool(self._held)


def holder_text(transfer_id: str) -> str:
    """Who holds a lock, as its file (or object) says."""
    return json.dumps({"transfer_id": transfer_id, "host": socket.gethostname(), "pid": os.getpid(),
                       "since": datetime.now(UTC).isoformat(timespec="seconds")})


def running_message(model: str, destination: str, holder: str) -> str:
    return (f"model '{model}' -> destination '{destination}': another transfer of this model to this "
            f"destination is running ({_holder(holder)}); two transfers never write one table at "
            "once. Fix: wait for it to end, or cancel it (transfer-platform cancel TRANSFER_ID), then "
            "run this one again; transfers queued through Dagster wait for each other by themselves")


def _holder(text: str) -> str:
    try:
        holder = json.loads(text)
        return (f"transfer {holder['transfer_id']}, process {holder['pid']} on {holder['host']}, "
                f"since {holder['since']}")
    except (ValueError, KeyError, TypeError):
        return "a process that has just started"
