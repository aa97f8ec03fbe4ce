"""Resources: the platform configuration with its destination writers, and the Spark session."""


import os
from functools import lru_cache

from dagster import ConfigurableResource
from dagster_pyspark import LazyPySparkResource

from transfer_platform.config import load_config
from transfer_platform.config.models import PlatformConfig
from transfer_platform.destinations.base import DestinationWriter, writer_for
from transfer_platform.spark_session import spark_conf


class TransferPlatformResource(ConfigurableResource):
    """The validated configuration file (it holds no secrets, only references to them)."""

    config_path: str

    @property
    def config(self) -> PlatformConfig:
        return _load(self.config_path, os.stat(self.config_path).st_mtime_ns)

    def writer(self, destination: str) -> DestinationWriter:
        return writer_for(self.config.destination(destination))


@lru_cache(maxsize=4)
def _load(path: str, _mtime_ns: int) -> PlatformConfig:
    return load_config(path)


def spark_resource(config: PlatformConfig) -> LazyPySparkResource:
    """One SparkSession per run, created when a step first needs it, shared by every model of
    the run (the definitions use the in-process executor so that a run is one process)."""
    return LazyPySparkResource(spark_config=spark_conf(config.spark))
