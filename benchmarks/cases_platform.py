"""transfer_platform's cases: its data path alone (``run_transfer``), a backfill end to end
through Dagster (the definitions built from a YAML file, materialized in process against a
temporary instance), incremental transfers, the per-window overhead and the definitions load.

Every recipient ``r<i>`` is tenant ``tenant-<i>`` with its own destination ``d<i>`` writing to the
schema ``<prefix>_<i>`` (one PostgreSQL schema per recipient).
"""

from __future__ import annotations

import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import yaml

from benchmarks.common import (
    COLUMNS,
    NOW,
    PG,
    TYPES,
    PeakMemory,
    RowCountMismatch,
    count_rows,
    drop_schemas,
    stats,
)
from benchmarks.source import SOURCE, touch_one_percent

#: the Spark settings of the harness's session and of the benchmark's configuration file
SPARK = {"master": "local[2]", "driver_memory": "2g"}
#: Dagster's console logger at WARNING: the benchmark prints its own table
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@contextmanager
def quiet_dagster() -> Iterator[None]:
    """Without Dagster's beta/preview warnings (one per asset: thousands of lines)."""
    import dagster as dg

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        warnings.simplefilter("ignore", dg.PreviewWarning)
        yield


def destination_schema(prefix: str, index: int) -> str:
    return f"{prefix}_{index}"


def platform_raw(tenants: list[str], prefix: str, *, window: int | None = None,
                 min_start: datetime | None = None) -> dict:
    """The configuration file's content: one postgres source, the ``events`` model, one
    recipient and one postgres destination per tenant (no passwords: trust auth)."""
    connection = {"host": PG["host"], "port": PG["port"], "database": PG["dbname"],
                  "username": PG["user"]}
    model = {"model_name": "events", "source_name": "src", "source_table": SOURCE,
             "organization_column": "tenant_id",
             "min_start_time_epoch": int((min_start or NOW - timedelta(days=400)).timestamp()),
             "columns": [{"name_in_source": c, "data_type": TYPES[c], "is_primary_key": c == "id",
                          "is_last_modified": c == "updated_at"} for c in COLUMNS]}
    if window:
        model["max_transfer_time_window_seconds"] = window
    return {
        "sources": [{"name": "src", "vendor": "postgres", "connection": connection}],
        "models": [model],
        "recipients": [{"name": f"r{i}", "id_in_provider_system": t} for i, t in enumerate(tenants)],
        "destinations": [{"name": f"d{i}", "vendor": "postgres", "recipient": f"r{i}",
                          "connection": {**connection, "schema": destination_schema(prefix, i)}}
                         for i in range(len(tenants))],
        "spark": dict(SPARK),
    }


def platform_config(tenants: list[str], prefix: str, **options):
    from transfer_platform.config.parsing import parse_config

    return parse_config(platform_raw(tenants, prefix, **options), now=NOW)


def delivered(prefix: str, indices: list[int], where: str = "", params: tuple = ()) -> int:
    """Rows in the ``events`` tables of the given destinations."""
    return sum(count_rows(f"{destination_schema(prefix, i)}.events", where, params) for i in indices)


# -- the data path alone ---------------------------------------------------------------------


def transfer_all(spark, config, now: datetime, indices: list[int] | None = None) -> int:
    """``run_transfer`` for destinations ``d<i>`` (all if ``indices`` is None), one after another;
    return the rows the platform says it moved."""
    from transfer_platform.destinations.base import writer_for
    from transfer_platform.transfers.order import TransferOrder
    from transfer_platform.transfers.runner import TransferRequest, run_transfer

    rows = 0
    for destination in config.destinations:
        if indices is not None and int(destination.name[1:]) not in indices:
            continue
        writer = writer_for(destination)
        try:
            (summary,) = run_transfer(TransferRequest(spark=spark, config=config,
                                                      order=TransferOrder(destination=destination.name),
                                                      writer=writer, transfer_id=uuid.uuid4().hex, now=now),
                                      config.models_for(destination))
        finally:
            writer.close()
        if summary.status != "SUCCESS":
            raise RuntimeError(summary.error)
        rows += summary.rows_transferred
    return rows


# -- incremental -----------------------------------------------------------------------------


def incremental(spark, tenants: list[str], index: int, prefix: str, *, runs: int, total: int,
                max_id: int | None = None) -> dict:
    """After an untimed backfill of tenant ``index``: ``runs`` times, change 1 % of its rows
    (untimed; see :func:`touch_one_percent` for ``max_id``), then time one incremental transfer.
    Each run checks that the destination holds every changed row at its new ``updated_at``
    and still ``total`` rows."""
    config = platform_config(tenants, prefix)
    seconds, changed = [], 0
    drop_schemas(prefix)
    with PeakMemory() as memory:
        transfer_all(spark, config, NOW, [index])
        for run in range(runs):
            moment = NOW + timedelta(hours=run + 1)
            changed_at = moment - timedelta(minutes=1)
            changed = touch_one_percent(tenants[index], len(tenants), changed_at, max_id=max_id)
            start = time.perf_counter()
            transfer_all(spark, config, moment, [index])
            seconds.append(time.perf_counter() - start)
            moved = delivered(prefix, [index], "WHERE updated_at = %s", (changed_at,))
            held = delivered(prefix, [index])
            if moved != changed or held != total:
                raise RowCountMismatch(f"incremental: {moved} of {changed} changed rows delivered, "
                                       f"{held} rows held, the source has {total}")
    drop_schemas(prefix)
    return {**stats(seconds), "rows": changed, "rows_checked": True, **memory.report}


# -- end to end through Dagster --------------------------------------------------------------


class DagsterBackfill:
    """The Dagster definitions of a YAML configuration in a temporary folder, materialized in
    process (the in-process executor of the definitions) against a temporary sqlite instance.

    The definitions' ``pyspark`` resource calls ``SparkSession.builder.getOrCreate()``: it gets
    the harness's active session, so no run pays a JVM start (:meth:`materialize` checks it)."""

    def __init__(self, tenants: list[str], prefix: str, folder: Path) -> None:
        import dagster as dg

        from transfer_platform.definitions import build_definitions

        home = folder / "dagster_home"
        home.mkdir(parents=True)
        path = folder / "transfer_platform.yaml"
        path.write_text(yaml.safe_dump(platform_raw(tenants, prefix)))
        self.prefix = prefix
        with quiet_dagster():
            self.defs = build_definitions(str(path))
        self.instance = dg.DagsterInstance.local_temp(str(home))

    def keys(self, indices: list[int]) -> set:
        from transfer_platform.orchestration.catalog.keys import transfer_asset_key

        return {transfer_asset_key(f"r{i}", f"d{i}", "events") for i in indices}

    def materialize(self, spark, indices: list[int]) -> None:
        """One run materializing the transfer assets of recipients ``r<i>`` (without their
        integrity checks, which are not part of a backfill)."""
        application = spark.sparkContext.applicationId
        with quiet_dagster():
            job = self.defs.resolve_implicit_global_asset_job_def().get_subset(
                asset_selection=self.keys(indices), asset_check_selection=set())
            result = job.execute_in_process(instance=self.instance, run_config=QUIET_RUN_CONFIG,
                                            raise_on_error=False)
        if not result.success:
            failures = [e.message for e in result.all_events if e.is_failure]
            raise RuntimeError(f"the Dagster run failed: {failures}")
        assert_same_session(spark, application)

    def close(self) -> None:
        self.instance.dispose()


def assert_same_session(spark, application: str) -> None:
    """The Dagster resource used the harness's session: same application, still active."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is None or active.sparkContext.applicationId != application or \
            spark.sparkContext.applicationId != application:
        raise RuntimeError("the Dagster run did not reuse the harness's SparkSession")


# -- definitions load ------------------------------------------------------------------------


def definitions_load_seconds(recipients: int, models: int) -> tuple[float, float]:
    """Build and resolve the asset graph of ``recipients`` x ``models`` daily-partitioned assets
    (a Parquet source and Delta destinations: nothing is connected to): the seconds of that
    load, and the seconds a code server spends after it before the UI can show them (the
    repository snapshot, serialized)."""
    from dagster._core.remote_representation.external_data import RepositorySnap  # pinned Dagster
    from dagster_shared.serdes import serialize_value

    from transfer_platform.definitions import build_definitions

    with tempfile.TemporaryDirectory() as folder:
        columns = [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                   {"name_in_source": "org", "data_type": "string"},
                   {"name_in_source": "ts", "data_type": "timestamp", "is_last_modified": True}]
        config = {
            "sources": [{"name": "lake", "vendor": "parquet", "connection": {"path": "lake"}}],
            "models": [{"model_name": f"m{m}", "source_name": "lake", "source_table": f"t{m}",
                        "organization_column": "org", "columns": columns,
                        "max_transfer_time_window_seconds": 86400,
                        "min_start_time_epoch": int((NOW - timedelta(days=365)).timestamp())}
                       for m in range(models)],
            "recipients": [{"name": f"r{r}", "id_in_provider_system": f"t{r}"} for r in range(recipients)],
            "destinations": [{"name": f"d{r}", "vendor": "delta", "recipient": f"r{r}",
                              "connection": {"path": f"dest/{r}"}} for r in range(recipients)],
        }
        path = Path(folder) / "transfer_platform.yaml"
        path.write_text(yaml.safe_dump(config))
        with quiet_dagster():
            start = time.perf_counter()
            defs = build_definitions(str(path))
            defs.resolve_asset_graph()
            loaded = time.perf_counter()
            serialize_value(RepositorySnap.from_def(defs.get_repository_def()))
            return loaded - start, time.perf_counter() - loaded

