"""Real Spark servers for the tests: the Spark Connect server that ``transfer-platform spark-server``
starts (as its own process, as a user runs it), and a Spark standalone cluster (a master and a
worker from PySpark's own ``bin/spark-class``) for it to run on. Stopped afterwards, whole."""

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

from transfer_platform_tests.support.s3_server import free_port

#: bounds a failure only: a server is up in ~10 s on a quiet machine
START_DEADLINE_S = 240


@dataclass(frozen=True)
class SparkServer:
    url: str  # sc://127.0.0.1:port
    log: Path  # the server's stdout and stderr (its JVM's log included)
    pid: int


def _wait_for(process: subprocess.Popen, log: Path, what: str, ready) -> None:  # noqa: ANN001
    deadline = time.monotonic() + START_DEADLINE_S
    while not ready():
        if process.poll() is not None:
            raise AssertionError(f"{what} exited with {process.returncode}: {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not start in {START_DEADLINE_S} s: {log.read_text()[-3000:]}")
        time.sleep(0.2)


def _stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _listening(port: int) -> bool:
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
        _wait_for(process, log, "transfer-platform spark-server",
                  lambda: "listening on" in log.read_text() and _listening(port))
        yield SparkServer(f"sc://127.0.0.1:{port}", log, process.pid)
    finally:
        _stop(process)


@dataclass(frozen=True)
class Cluster:
    master_url: str  # spark://127.0.0.1:port
    master_log: Path
    worker_log: Path


@contextmanager
def standalone_cluster(folder: Path, *, cores: int = 2, memory: str = "1g") -> Iterator[Cluster]:
    """A Spark standalone master and one worker on 127.0.0.1, started from PySpark's own
    ``bin/spark-class`` (the wheel has the classes, not ``sbin/start-master.sh``)."""
    import pyspark

    folder.mkdir(parents=True, exist_ok=True)
    spark_home = Path(pyspark.__file__).parent
    spark_class = str(spark_home / "bin" / "spark-class")
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "SPARK_WORKER_DIR": str(folder / "work")}
    port, web = free_port(), free_port()
    master_log, worker_log = folder / "master.log", folder / "worker.log"
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(web)], stdout=master_log.open("w"),
                              stderr=subprocess.STDOUT, start_new_session=True, env=env)
    worker = None
    try:
        _wait_for(master, master_log, "the Spark master", lambda: "I have been elected leader" in
                  master_log.read_text())
        url = f"spark://127.0.0.1:{port}"
        worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                   "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                                   url], stdout=worker_log.open("w"), stderr=subprocess.STDOUT,
                                  start_new_session=True, env=env)
        _wait_for(worker, worker_log, "the Spark worker", lambda: "Successfully registered with master" in
                  worker_log.read_text())
        yield Cluster(url, master_log, worker_log)
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)
