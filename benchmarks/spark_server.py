"""The Spark Connect server that ``transfer-platform spark-server`` starts, as its own process (as
a user runs it) on a free port of 127.0.0.1, stopped afterwards, whole: for the end-to-end
benchmark and the tests (``transfer_platform_tests/support/spark_server.py`` adds a standalone
cluster)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: bounds a failure only: a server is up in ~10 s on a quiet machine
START_DEADLINE_S = 240


@dataclass(frozen=True)
class SparkServer:
    url: str  # sc://127.0.0.1:port
    log: Path  # the server's stdout and stderr (its JVM's log included)
    pid: int


def wait_for(process: subprocess.Popen, log: Path, what: str, ready) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while not ready():
        if process.poll() is not None:
            raise AssertionError(f"{what} exited with {process.returncode}: {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not start in {START_DEADLINE_S} s: {log.read_text()[-3000:]}")
        time.sleep(0.2)


def stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@contextmanager
def spark_connect_server(folder: Path, *, master: str = "local[2]", driver_memory: str = "1g",
                         conf: dict[str, str] | None = None) -> Iterator[SparkServer]:
    """``transfer-platform spark-server`` on a free port of 127.0.0.1, with a configuration file
    holding these spark settings; yields once it says it listens."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = folder / "spark_server.yaml"
    settings = {"master": master, "driver_memory": driver_memory, "remote": f"sc://127.0.0.1:{port}",
                "conf": {"spark.sql.shuffle.partitions": "2", **(conf or {})}}
    config.write_text(yaml.safe_dump({"spark": settings}))
    log = folder / "spark_server.log"
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRANSFER_PLATFORM_SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    process = subprocess.Popen([sys.executable, "-m", "transfer_platform.cli", "--config", str(config),
                                "spark-server"], stdout=log.open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True, env=env)
    try:
        wait_for(process, log, "transfer-platform spark-server",
                  lambda: "listening on" in log.read_text() and listening(port))
        yield SparkServer(f"sc://127.0.0.1:{port}", log, process.pid)
    finally:
        stop(process)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
