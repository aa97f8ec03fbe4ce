"""The fork server the resident command process (:mod:`~transfer_platform.runtime.resident`) and
the preloaded parent of Dagster's runs (:mod:`~transfer_platform.orchestration.speed.run_worker`) share:
a process that imports what its children need once, then forks a child per request and reaps it.

What they share is the mechanism: the imports made ahead (:func:`warm`), the refusal to fork
when the imported code changed since (``"stale"``: its files' names, sizes and modification
times, :func:`package_stamp`) or when a thread runs (``"threads"``: a fork would carry a broken
copy of it), a child that never returns into the parent's loop (:meth:`ForkServer.fork`), and the
reaping of ended children (:meth:`ForkServer.reap`), each told to the server by
:meth:`ForkServer.ended`. What a request is, what a child runs and whom an ending is told to are
theirs.

Standard library only: the ``transfer-platform`` executable imports this before it knows whether
a resident process serves it.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import select
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

Mark = TypeVar("Mark")  # what a server keeps of each child (its caller, its run)


def package_stamp(module: str) -> list:
    """The files of ``module``'s top package (names, sizes, modification times): changed, the
    code a process imported is stale."""
    import importlib.util

    stamp: list = []
    spec = importlib.util.find_spec(module.split(".")[0])
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(Path(folder).rglob("*.py")):
            with contextlib.suppress(OSError):
                status = path.stat()
                stamp.append([str(path), status.st_size, status.st_mtime_ns])
    return stamp


def warm(modules: tuple[str, ...], skipped: type[BaseException] | tuple[type[BaseException], ...] = ImportError,
         ) -> None:
    """Import ``modules`` ahead of the forks (one that raises ``skipped`` is left out)."""
    for name in modules:
        with contextlib.suppress(skipped):
            importlib.import_module(name)



def ready(watched: Sequence[Any], timeout: float) -> list[Any]:
    """Those of ``watched`` (descriptors, or objects with ``fileno()``) that have something to read
    or reached their end within ``timeout`` seconds. ``poll``, not ``select()``, which refuses
    descriptors numbered 1024 and above (a long-lived process may hold that many)."""
    poller, by_fd = select.poll(), {}
    for item in watched:
        fd = item if isinstance(item, int) else item.fileno()
        by_fd[fd] = item
        poller.register(fd, select.POLLIN)
    return [by_fd[fd] for fd, _ in poller.poll(max(0.0, timeout) * 1000)]


class ForkServer(Generic[Mark]):
    """A preloaded parent's children (pid -> what it keeps of each), forked and reaped.

    ``code``: what, changed, makes the code the parent imported stale (:func:`package_stamp`, or
    more); :meth:`remember_code` takes its stamp once the parent has imported it."""

    def __init__(self, code: Callable[[], list]) -> None:
        self.code = code
        self.stamp: list | None = None
        self.children: dict[int, Mark] = {}

    def remember_code(self) -> None:
        self.stamp = self.code()

    def refusal(self) -> str | None:
        """Why a fork is refused now: ``"stale"`` (the code changed since :meth:`remember_code`),
        ``"threads"`` (a thread runs, which the fork would carry half), else ``None``."""
        if self.code() != self.stamp:
            return "stale"
        return "threads" if threading.active_count() > 1 else None

    @staticmethod
    def freeze() -> None:
        """Collect the parent's garbage, then hide the rest from the garbage collector
        (``gc.freeze``): a child's collections then never walk the objects it inherited. Walking
        them writes to each object's header, which copies every page of the preloaded heap
        (Dagster, the definitions, the data path's libraries) into the child: 0.2-0.4 s of a small
        transfer on 2 cores, in its first full collection. Called once the imports are done and
        before each fork; only what the parent made since the last one is new then."""
        gc.collect()
        gc.freeze()

    def fork(self, child: Callable[[], int]) -> int:
        """Fork a process that runs ``child()`` and exits with what it returns (never returning
        into the parent's loop); its pid, in the parent. The parent's objects are frozen first
        (:meth:`freeze`)."""
        self.freeze()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = child()
            finally:
                os._exit(code)
        return pid

    def reap(self, block: bool = False) -> None:
        """Collect the children that ended (``block``: wait for one), each told to :meth:`ended`."""
        while self.children:
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:  # none left (they were collected elsewhere)
                self.children.clear()
                return
            if pid == 0:
                return
            self.ended(pid, self.children.pop(pid, None), status)

    def reap_all(self) -> None:
        """Wait for every child (the parent is going; their callers still wait for them)."""
        while self.children:
            self.reap(block=True)

    def ended(self, pid: int, mark: Mark | None, status: int) -> None:
        """Child ``pid`` (kept as ``mark``; ``None`` if it was not a child of ours) ended with
        ``status`` (``os.waitpid``'s)."""
