"""A real Spark standalone cluster for the tests (a master and a worker from PySpark's own
``bin/spark-class``), stopped afterwards, whole; the Spark Connect server to run on it is
``benchmarks/spark_server.py``'s (the end-to-end benchmark starts it too)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.spark_server import (
    free_port,
    stop,
    wait_for,
)


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
        wait_for(master, master_log, "the Spark master", lambda: "I have been elected leader" in
                  master_log.read_text())
        url = f"spark://127.0.0.1:{port}"
        worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                   "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                                   url], stdout=worker_log.open("w"), stderr=subprocess.STDOUT,
                                  start_new_session=True, env=env)
        wait_for(worker, worker_log, "the Spark worker", lambda: "Successfully registered with master" in
                  worker_log.read_text())
        yield Cluster(url, master_log, worker_log)
    finally:
        if worker is not None:
            stop(worker)
        stop(master)
