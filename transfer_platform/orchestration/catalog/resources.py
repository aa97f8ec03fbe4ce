"""Resources: the platform configuration with its destination writers, and the Spark session."""


from functools import lru_cache

from dagster import ConfigurableResource
from dagster_pyspark import LazyPySparkResource

from transfer_platform.config.loading import load_config
from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.shards import parse_shard, shard_config
from transfer_platform.destinations.base import DestinationWriter, writer_for
from transfer_platform.orchestration.scheduling.config_stamp import config_stamp
from transfer_platform.runtime.spark_session import session_from_conf, spark_conf, stop_session


class TransferPlatformResource(ConfigurableResource):
    """The validated configuration file (it holds no secrets, only references to them); with
    ``shard`` (``i/n``, see ``config/shards.py``), the share of its recipients this code location
    holds: the sensor requests runs of these destinations only."""

    config_path: str
    shard: str = ""

    @property
    def config(self) -> PlatformConfig:
        return _load(self.config_path, config_stamp(self.config_path), self.shard)

    def writer(self, destination: str) -> DestinationWriter:
        return writer_for(self.config.destination(destination))


@lru_cache(maxsize=4)
def _load(path: str, _stamp: tuple, shard: str = "") -> PlatformConfig:
    return shard_config(load_config(path), parse_shard(shard, where="TransferPlatformResource.shard"))


class TransferSparkResource(LazyPySparkResource):
    """Dagster's lazy PySpark resource, whose session is the platform's: a client of the Spark
    Connect server (``spark.remote``; checked: reachable, same version), or by default of the
    shared Spark server of this machine, found or started when the run's first step needs Spark
    (never when definitions load), or a local Spark whose JVM log drops passwords (opted out, or
    the shared server unusable); a client's session is released on the server when the run ends."""

    def _init_session(self) -> None:
        if self._spark_session is None:
            self._spark_session = session_from_conf(self.spark_config)

    def teardown_after_execution(self, context) -> None:
        stop_session(self._spark_session)
        self._spark_session = None


def spark_resource(config: PlatformConfig) -> LazyPySparkResource:
    """One SparkSession per run, created when a step first needs it, shared by every model of
    the run (the definitions use the in-process executor so that a run is one process); with
    ``spark.remote``, a session of that Spark Connect server, else (``spark.shared``, the default)
    one of the shared server :mod:`transfer_platform.runtime.shared_spark` starts, instead of a Spark of
    its own. Only settings here: nothing starts until the run's session does."""
    return TransferSparkResource(spark_config=spark_conf(config.spark))
