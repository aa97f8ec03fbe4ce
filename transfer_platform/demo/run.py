"""``transfer-platform demo``: backfill, change the source, transfer incrementally, check.

Runs on an embedded default: a Parquet lake and Delta destinations on local disk (one recipient
also receives two models as Parquet files with signed manifests in a folder, which the demo reads
as a consumer would: signature, checksums, latest version per key; another every model in a DuckDB
file, read back with the duckdb package), Spark in local mode (the shared Spark server started on first use, or in the process), no server to install or start. With ``DAGSTER_HOME`` set, every window is also reported to that Dagster instance, so
``dagster dev`` shows it materialized.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transfer_platform.config.loading import load_config
from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.signing_keys import load_signing_key
from transfer_platform.console.streams import child_output
from transfer_platform.demo import sample_data
from transfer_platform.destinations.base import arrow_schema
from transfer_platform.destinations.delta import DeltaWriter
from transfer_platform.destinations.manifests import (
    application_order,
    new_signing_key,
    public_key_text,
    verify_manifest,
)
from transfer_platform.destinations.object_storage import latest_per_key
from transfer_platform.errors import ConfigError, Problem
from transfer_platform.runtime.spark_session import get_spark_session
from transfer_platform.transfers.entry import Transfer
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.outcomes import ModelSummary
from transfer_platform.vendors.delta import DeltaDestination
from transfer_platform.vendors.duckdb import DuckdbDestination


def tenant_rows_equal(config: PlatformConfig, destination_name: str, model_name: str,
                      public_key: str | None = None) -> bool:
    """Does the destination hold exactly the tenant's source rows (every column, every value)?
    Object storage: as a consumer reads it (:func:`consumed_rows`, with ``public_key``)."""
    destination = config.destination(destination_name)
    model = config.model(model_name)
    tenant = config.recipient(destination.recipient).id_in_provider_system
    source_root = Path(config.source(model.source_name).connection.path)
    source = pq.read_table(source_root / model.source_table)
    source = source.filter(pc.equal(source.column(model.organization_column), tenant))
    source = source.select([c.name_in_source for c in model.columns]).rename_columns(
        [c.destination_name for c in model.columns])
    if isinstance(destination, DeltaDestination):
        from deltalake import DeltaTable

        delivered = DeltaTable(str(DeltaWriter(destination).table_path(model))).to_pyarrow_table()
    elif isinstance(destination, DuckdbDestination):
        delivered = duckdb_rows(destination, model_name)
    else:  # the demo's other destination: files with signed manifests
        delivered = consumed_rows(config, destination_name, model_name, public_key)
    keys = [(c.destination_name, "ascending") for c in model.primary_key]
    source = source.sort_by(keys)
    delivered = delivered.select(source.column_names).cast(source.schema).sort_by(keys)
    return source.equals(delivered)


def duckdb_rows(destination: DuckdbDestination, model_name: str) -> pa.Table:
    """A DuckDB destination's table as a reader opens it: the file read-only, with the duckdb package."""
    import duckdb

    schema = destination.connection.schema_ or "main"
    with duckdb.connect(str(destination.connection.path), read_only=True) as conn:
        return conn.sql(f'SELECT * FROM "{schema}"."{model_name}"').to_arrow_table()


def consumed_rows(config: PlatformConfig, destination_name: str, model_name: str, public_key: str) -> pa.Table:
    """A consumer's reading of a ``local`` object-storage destination: every manifest of the
    model verified with the pinned public key, every file it applies against its SHA-256, the
    manifests applied in the documented order (by ``sequence``, from the last FULL_REFRESH on),
    then per key the latest last-modified version."""
    destination = config.destination(destination_name)
    model = config.model(model_name)
    bucket = Path(destination.connection.path)
    folder = bucket / destination.connection.prefix / "_manifests" / model_name
    manifests = [json.loads(p.read_text()) for p in folder.rglob("manifest_*.json")]
    tables = []
    for manifest in manifests:
        verify_manifest(manifest, public_key)  # raises unless signed by that key, unchanged
    for manifest in application_order(manifests):
        for entry in manifest["files"]:
            data = (bucket / entry["data_file_key"]).read_bytes()
            if hashlib.sha256(data).hexdigest() != entry["sha256_checksum"]:
                raise ValueError(f"{entry['data_file_key']} is not the file its manifest names")
            tables.append(pq.read_table(pa.BufferReader(data)))
    rows = pa.concat_tables(tables) if tables else arrow_schema(model).empty_table()
    return latest_per_key(rows.cast(arrow_schema(model)), model)


#: destinations the demo moves at once, as the daemon runs transfers of different destinations
#: side by side (threads sharing the one Spark session; each destination's windows in order)
DESTINATIONS_AT_ONCE = 2


def _transfer_all(config: PlatformConfig, spark, instance, label: str) -> dict[tuple[str, str], ModelSummary]:
    reporting = threading.Lock()  # one partition reported to the Dagster instance at a time

    def transfer(destination) -> dict[tuple[str, str], ModelSummary]:
        report = None
        if instance is not None:
            from transfer_platform.orchestration.catalog.reporting import RunlessReporter

            report = RunlessReporter(instance, config, destination.name)
        moving = Transfer(spark=spark, config=config, order=TransferOrder(destination=destination.name),
                          now=datetime.now(UTC), transfer_id=f"{label}-{uuid.uuid4().hex[:8]}")
        for model, partition in moving.run():
            if report is not None:
                with reporting:
                    report(model, partition)
        return {(destination.name, summary.model): summary for summary in moving.summaries}

    results = {}
    with ThreadPoolExecutor(DESTINATIONS_AT_ONCE, thread_name_prefix="demo-transfer") as pool:
        for done in pool.map(transfer, config.destinations):
            results.update(done)
    return results


def _transfer_and_check(label: str, config: PlatformConfig, spark, instance, public_key: str) -> bool:
    """Every destination transferred, then a table of the outcomes; whether each equals its source."""
    t0 = time.perf_counter()
    results = _transfer_all(config, spark, instance, label)
    print(f"\n== {label} ({time.perf_counter() - t0:.1f} s)")
    print(f"{'destination':<13} {'model':<9} {'status':<7} {'windows':>7} {'rows':>7} {'delta':>7}  {'watermark':<32}"
          "  equals source")
    all_equal = True
    for destination in config.destinations:
        for model in config.models_for(destination):
            summary = results[(destination.name, model.model_name)].as_dict()
            line = (f"{destination.name:<13} {model.model_name:<9} {summary['status']:<7} "
                    f"{summary['windows']:>7} {summary['rows_transferred']:>7} "
                    f"{summary['delta_rows_transferred']:>7}  {summary['watermark'] or '-':<32}")
            if summary["status"] != "SUCCESS":
                all_equal = False
                line += f"  ERROR: {summary['error']}"
            else:
                equal = tenant_rows_equal(config, destination.name, model.model_name, public_key)
                all_equal &= equal
                line += "  yes" if equal else "  NO"
            print(line)
    return all_equal


#: the file that marks a folder as the demo's output: only such a folder is emptied by a later demo
MARKER = ".transfer_platform_demo"


def prepare_workdir(workdir: Path) -> Path:
    """The demo's folder (resolved), empty but for :data:`MARKER`: created if missing, used if
    empty, emptied if an earlier demo made it (it holds the marker). Anything else (a file, a
    folder with other contents) is refused with ``ConfigError`` and left as it is: the demo never
    deletes what it did not make."""
    workdir = workdir.resolve()
    fix = ("give --dir a new or empty folder (default: demo_output), or remove this one yourself "
           "if nothing in it is needed")
    if workdir.exists() and not workdir.is_dir():
        raise ConfigError([Problem("demo --dir", f"{workdir} is not a folder; the demo writes a folder of "
                                   "its own there", fix)])
    if workdir.is_dir() and any(workdir.iterdir()):
        if not (workdir / MARKER).is_file():
            raise ConfigError([Problem(
                "demo --dir", f"{workdir} is not empty and is not an earlier demo's output (it has no "
                f"{MARKER} file); the demo empties its folder, so it does not use this one", fix)])
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / MARKER).write_text("written by transfer-platform demo: this folder is emptied by the "
                                  "next demo that uses it\n")
    return workdir


def run_demo(workdir: Path, *, days: int = sample_data.DAYS, scale: float = 1.0, verbose: bool = False,
             shared: bool | None = None) -> bool:
    """Run the demo in ``workdir`` (see :func:`prepare_workdir`); whether every destination
    equals its tenant's source rows. The local Spark's output (its banner, log and Java stack
    traces) is kept off the terminal unless ``verbose``."""
    workdir = prepare_workdir(workdir)
    started = datetime.now(UTC)
    lake = workdir / "lake"
    counts = sample_data.generate_lake(lake, started, days=days, scale=scale)
    public_key = _signing_key(workdir)
    config_path = workdir / "transfer_platform.yaml"
    min_start = int(started.timestamp()) - days * 86_400 - 3_599  # any second works
    sample_data.write_config(config_path, lake="lake", destinations="destinations", min_start_epoch=min_start)
    config = load_config(config_path)
    print(f"sample lake: {lake} ({json.dumps(counts)} rows across {len(sample_data.TENANTS)} tenants)")
    print(f"configuration: {config_path}")

    instance = None
    if os.environ.get("DAGSTER_HOME"):
        from dagster import DagsterInstance

        instance = DagsterInstance.get()
        print(f"reporting materializations to the Dagster instance in {os.environ['DAGSTER_HOME']}")

    warnings: list[str] = []
    with child_output(verbose):
        spark = get_spark_session(config.spark, shared=shared, warn=warnings.append)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    ok = _transfer_and_check("backfill", config, spark, instance, public_key)

    time.sleep(1.0)  # let the clock move past the backfill's "now"
    changes = sample_data.change_lake(lake, datetime.now(UTC))
    print(f"\nchanged the lake: {json.dumps(changes)}")
    ok &= _transfer_and_check("incremental", config, spark, instance, public_key)
    print("acme_files: every manifest verified with the pinned public key, every file with its SHA-256")
    print("\nresult:", "every destination equals its tenant's source rows" if ok else "MISMATCH (see above)")
    return ok


def _signing_key(workdir: Path) -> str:
    """The object-storage destination's signing key: the variable's if set, else a new pair, the
    private key put in the environment and written to ``demo.env`` (source it before ``dagster
    dev``); returns the public key, which the demo pins as a consumer would."""
    variable = sample_data.SIGNING_KEY_VARIABLE
    if os.environ.get(variable):
        public = public_key_text(load_signing_key(os.environ[variable]))
    else:
        private, public = new_signing_key()
        os.environ[variable] = private
    (workdir / "demo.env").write_text(f"export {variable}={os.environ[variable]}\n")
    (workdir / "public_key").write_text(public + "\n")
    return public
