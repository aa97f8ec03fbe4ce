"""``defs``: the Dagster definitions built from the configuration file.

The file is found as the CLI finds it: ``$TRANSFER_PLATFORM_CONFIG``, else
``transfer_platform.yaml`` in the working directory. Loading is lazy (``@dg.definitions``):
nothing is read at import time.
"""

from __future__ import annotations

import re

import dagster as dg

from transfer_platform.config.loading import load_config
from transfer_platform.config.parsing import find_config_path
from transfer_platform.config.shards import (
    current_shard,
    does_instance_upkeep,
    parse_shard,
    shard_config,
)
from transfer_platform.orchestration import speed
from transfer_platform.orchestration.catalog.assets import source_specs, transfer_assets
from transfer_platform.orchestration.catalog.checks import integrity_job
from transfer_platform.orchestration.catalog.io_manager import DestinationIOManager
from transfer_platform.orchestration.catalog.resources import (
    TransferPlatformResource,
    spark_resource,
)
from transfer_platform.orchestration.instance.retention import run_retention_sensor
from transfer_platform.orchestration.jobs.connection_test_job import connection_test_job
from transfer_platform.orchestration.jobs.delete_sweep_job import delete_sweep_job
from transfer_platform.orchestration.jobs.transfer_job import transfer_job
from transfer_platform.orchestration.scheduling.sensors import (
    transfer_assets_jobs,
    transfer_schedule_sensor,
)
from transfer_platform.webhooks.sensors import webhook_sensors


def build_definitions(config_path: str | None = None, shard: str | None = None) -> dg.Definitions:
    """The definitions of the configuration's recipients; with ``shard`` (``i/n``), else
    ``$TRANSFER_PLATFORM_SHARD``, of that share of them (``config/shards.py``)."""
    speed.install()  # the code server's (and the run workers' parent's): the speed kit, its one hook
    path = str(find_config_path(config_path).resolve())
    share = current_shard() if shard is None else parse_shard(shard, where="the shard of the definitions")
    config = shard_config(load_config(path), share)
    platform = TransferPlatformResource(config_path=path, shard=str(share or ""))
    pyspark = spark_resource(config)
    transfers = transfer_assets(config)
    asset_jobs = transfer_assets_jobs(transfers)
    upkeep = does_instance_upkeep(share)
    return dg.Definitions(
        assets=[*source_specs(config), *transfers],
        jobs=[transfer_job, integrity_job, connection_test_job, delete_sweep_job, *asset_jobs],
        # run retention and webhooks are instance-wide: one code location has them (the unsharded
        # one, or shard 0); webhooks only with a store
        sensors=[transfer_schedule_sensor(asset_jobs), *([run_retention_sensor()] if upkeep else []),
                 *(webhook_sensors() if upkeep and config.store is not None else [])],
        resources={
            "platform": platform,
            "pyspark": pyspark,
            "io_manager": DestinationIOManager(platform=platform, pyspark=pyspark),
        },
        # one process per run: one SparkSession shared by every model and window of the run
        executor=dg.in_process_executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()


_SHARD_ATTRIBUTE = re.compile(r"defs_shard_(\d+)_of_(\d+)")


def __getattr__(name: str) -> object:
    """``defs_shard_<i>_of_<n>``: the definitions of shard ``i/n`` (a workspace's attribute, e.g.
    ``attribute: defs_shard_0_of_4``; it travels with each run's code pointer, so every process
    that loads a run's code builds the same share, whatever its environment)."""
    match = _SHARD_ATTRIBUTE.fullmatch(name)
    if match is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    shard = f"{match.group(1)}/{match.group(2)}"
    parse_shard(shard, where=f"transfer_platform.definitions:{name}")  # a bad one fails here, named

    @dg.definitions
    def sharded() -> dg.Definitions:
        return build_definitions(shard=shard)

    globals()[name] = sharded
    return sharded
