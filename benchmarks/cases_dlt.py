"""dlt (pinned 1.31.0) doing the same copies: the ``sql_table`` source on ``<SCHEMA>.events``
with ``backend="pyarrow"``, incremental on ``updated_at``, a ``query_adapter_callback`` adding
``WHERE tenant_id = ...``, merge write disposition on the primary key ``id``, into the postgres
destination with one dataset (schema) per tenant: ``<SCHEMA>_dlt_<i>`` (dlt adds its own
``<SCHEMA>_dlt_<i>_staging`` for the merge). Everything else is dlt's default (loader file
format, workers). Pipelines' working folders live in a temporary folder; telemetry is off.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.common import PG_URL, SCHEMA, count_rows
from benchmarks.source import SOURCE

PREFIX = f"{SCHEMA}_dlt"
#: dlt's postgres destination insists on a password; the server (trust auth) never asks for it
DESTINATION_URL = PG_URL.replace("postgres@", "postgres:unused@")
ENVIRONMENT = {"RUNTIME__DLTHUB_TELEMETRY": "false", "RUNTIME__LOG_LEVEL": "ERROR"}


def dataset(index: int) -> str:
    return f"{PREFIX}_{index}"


def version() -> str:
    import dlt

    return dlt.__version__


@contextmanager
def dlt_environment(folder: Path) -> Iterator[None]:
    """dlt's settings for the block: no telemetry, quiet (its reflection warns that it cannot map
    DOUBLE PRECISION: harmless with the pyarrow backend), its global data folder in ``folder``;
    dlt is imported here, untimed."""
    wanted = {**ENVIRONMENT, "DLT_DATA_DIR": str(folder / "dlt_data")}
    saved = {key: os.environ.get(key) for key in wanted}
    os.environ.update(wanted)
    try:
        import dlt  # noqa: F401
        from dlt.sources.sql_database import sql_table  # noqa: F401

        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def dlt_copy(tenant: str, index: int, pipelines_dir: Path) -> None:
    """One tenant into its own dataset with one dlt pipeline run."""
    import dlt
    from dlt.sources.sql_database import sql_table

    schema, table = SOURCE.split(".")

    def only_tenant(query, source_table):
        return query.where(source_table.c.tenant_id == tenant)

    events = sql_table(credentials=PG_URL, schema=schema, table=table, backend="pyarrow",
                       incremental=dlt.sources.incremental("updated_at"),
                       write_disposition="merge", primary_key="id",
                       query_adapter_callback=only_tenant)
    pipeline = dlt.pipeline(pipeline_name=dataset(index), pipelines_dir=str(pipelines_dir),
                            destination=dlt.destinations.postgres(credentials=DESTINATION_URL),
                            dataset_name=dataset(index))
    pipeline.run(events)  # raises on a failed load job


def dlt_all(tenants: list[str], pipelines_dir: Path) -> None:
    for index, tenant in enumerate(tenants):
        dlt_copy(tenant, index, pipelines_dir)


def dlt_delivered(indices: list[int]) -> int:
    """Rows in the ``events`` tables of the given tenants' datasets."""
    return sum(count_rows(f"{dataset(i)}.events") for i in indices)


def forget_pipelines(pipelines_dir: Path) -> None:
    """Remove the pipelines' local state (their datasets are dropped separately)."""
    shutil.rmtree(pipelines_dir, ignore_errors=True)
