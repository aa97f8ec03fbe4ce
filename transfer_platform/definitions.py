"""``defs``: the Dagster definitions built from the configuration file.

The file is found as the CLI finds it: ``$TRANSFER_PLATFORM_CONFIG``, else
``transfer_platform.yaml`` in the working directory. Loading is lazy (``@dg.definitions``):
nothing is read at import time.
"""

from __future__ import annotations

import dagster as dg

from transfer_platform.config import find_config_path, load_config
from transfer_platform.orchestration import dagster_internals
from transfer_platform.orchestration.assets import source_specs, transfer_assets
from transfer_platform.orchestration.checks import integrity_checks, integrity_job
from transfer_platform.orchestration.connection_test_job import connection_test_job
from transfer_platform.orchestration.dagster_fixes import install as install_dagster_fixes
from transfer_platform.orchestration.delete_sweep_job import delete_sweep_job
from transfer_platform.orchestration.io_manager import DestinationIOManager
from transfer_platform.orchestration.resources import TransferPlatformResource, spark_resource
from transfer_platform.orchestration.retention import run_retention_sensor
from transfer_platform.orchestration.sensors import transfer_assets_jobs, transfer_schedule_sensor
from transfer_platform.orchestration.transfer_job import transfer_job


def build_definitions(config_path: str | None = None) -> dg.Definitions:
    install_dagster_fixes()  # the code server's: the epoch tick, runs cancelled when `dagster dev` stops
    dagster_internals.warn_problems("repair", "run_tags")  # a Dagster lacking what the sensor uses: named
    path = str(find_config_path(config_path).resolve())
    config = load_config(path)
    platform = TransferPlatformResource(config_path=path)
    pyspark = spark_resource(config)
    transfers = transfer_assets(config)
    asset_jobs = transfer_assets_jobs(transfers)
    integrity = integrity_job(config)
    return dg.Definitions(
        assets=[*source_specs(config), *transfers],
        asset_checks=integrity_checks(config),
        jobs=[transfer_job, integrity, connection_test_job, delete_sweep_job, *asset_jobs],
        sensors=[transfer_schedule_sensor(integrity, asset_jobs), run_retention_sensor()],
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
