"""A server of the tests (an S3-compatible store, Azurite) run as its own process on 127.0.0.1:
started, waited on until it listens, stopped with its process group afterwards; whether a
process group still runs; and a transfer killed with -9 at a chosen moment (the crash tests)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.spark_server import free_port


@contextmanager
def listening(name: str, command: list[str], log: Path, *, env: dict[str, str] | None = None,
              port: int | None = None) -> Iterator[int]:
    """Run ``command`` (which listens on ``port``, a free one unless given: ``{port}`` in the
    command is replaced by it) with its output in ``log``; yield the port once it accepts
    connections, and stop the process afterwards."""
    port = port or free_port()
    process = subprocess.Popen([part.replace("{port}", str(port)) for part in command], stdout=log.open("w"),
                               stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 120  # bounds a failure: each starts in about a second
        while True:
            if process.poll() is not None:
                raise AssertionError(f"{name} exited: {log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{name} did not listen in 120 s: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield port
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (not gone, not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies waiting for their reaper do not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def live_children(parent: int) -> list[tuple[int, str]]:
    """(pid, command name) of each process whose parent is ``parent``, zombies left out."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, rest = stat.read_text().split("(", 1)[1].rsplit(")", 1)
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        state, ppid = rest.split()[:2]
        if int(ppid) == parent and state != "Z":
            found.append((int(stat.parent.name), name))
    return found


def transfer_killed_when(config: Path, destination: str, folder: Path, caught, *, timeout: float,
                         poll: float = 0.02, script: str | None = None) -> None:
    """``transfer-platform transfer <destination>`` of the configuration file ``config`` (or the
    Python ``script``, given the file's path), run as its own process group (its output in
    ``folder/cli.out``), killed with SIGKILL as soon as ``caught()`` is true (a window half
    written); returns once no process of the group (the JVM, its Python workers) runs any more.
    Fails if the transfer ends first, or after ``timeout``."""
    import sys

    from transfer_platform_tests.support.cli import PACKAGE_ROOT

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
    env.pop("DAGSTER_HOME", None)
    command = (["-m", "transfer_platform.cli", "--config", str(config), "transfer", destination] if script is None
               else ["-c", script, str(config)])
    with open(folder / "cli.out", "wb") as out:
        proc = subprocess.Popen([sys.executable, *command], cwd=folder, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        launched = time.monotonic()
        while not caught():
            assert proc.poll() is None, "the transfer ended first: " + (folder / "cli.out").read_text(
                errors="replace")[-3000:]
            assert time.monotonic() - launched < timeout, "the moment to kill it never came"
            time.sleep(poll)
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while group_alive(proc.pid):  # the JVM and its Python workers too: they write the window
        assert time.monotonic() < deadline, "the killed transfer's processes did not end"
        time.sleep(0.1)
