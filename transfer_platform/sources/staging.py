"""Source staging: one read of a model's changed rows for every due recipient.

Off unless a PostgreSQL source sets ``staging: {path: <folder>, max_age_hours: 24}``. Without it
every destination's incremental transfer queries the source for its own tenant; with it, the
transfers of one schedule tick share a *batch*:

- **Batch.** ``<path>/<source>/<model>/batches/<id>/``: one Parquet file per tenant and a
  ``manifest.json`` naming the query's hash (model columns, relation, organization and
  last-modified columns), the tick, the read's bounds ``lower <= last_modified < upper`` (NULL
  values included), each tenant's file and the destinations still to take it (``pending``). It is
  written by ONE query (``org IN (...)``, every tenant id a quoted literal) and the manifest is
  written last: a batch without one is unfinished and ignored (the sweep removes it).
- **Lock.** Every change in ``<path>/<source>/<model>/`` happens under an ``fcntl`` lock of
  its ``.lock`` file, so separate processes (Dagster runs, CLI invocations) see each other's batches.
- **Who is in a batch.** After each transfer, a destination records its *demand* (the lowest
  last-modified value its next incremental transfer will read from) in ``demand/``. The first
  transfer of a tick that finds no batch of that tick creates one for itself and every
  destination of the model with the same frequency (those due at the same ticks) that has a
  demand, from the lowest of their lower bounds, up to its own "now".
- **Who uses it.** A transfer uses a batch of its tick (``latest_tick(frequency, now)``) that
  lists its destination as pending, of the same query hash, whose lower bound is at or before
  every read it plans: it plans (and commits its watermark) up to ``min(now, upper)``, and reads
  each window from its tenant's rows with its own bounds, lookback and windows, exactly as the
  source would return them for that snapshot. Anything else (a full refresh, explicit windows,
  the first transfer, a lower bound the batch does not reach, another tick's batch) reads the
  source itself, as without staging.
- **Deletion.** A destination that committed its last window is removed from ``pending``; a
  tenant's file goes when no pending destination needs it, the batch when none is left. A
  destination found pending in an older tick's batch is removed from it. Any batch older than
  ``max_age_hours`` is deleted whatever is pending (the sweep runs under the lock at each use).
- **Failures.** A staging folder that cannot be read or written (missing mount, full disk, no
  rights) makes the transfer read the source itself after ONE warning; nothing is lost (the
  source read is the one without staging) and nothing is duplicated (upserts).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transfer_platform.config.models import ModelConfig, PlatformConfig, PostgresSource
from transfer_platform.core.schedule import DEFAULT_FREQUENCY_MINUTES, latest_tick
from transfer_platform.core.timeutil import isoformat
from transfer_platform.sources.base import (
    WINDOW_COLUMN,
    ReadRequest,
    check_last_modified_type,
    in_bounds_tags,
    model_columns,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.sources.jdbc import JdbcReader

_LOG = logging.getLogger("transfer_platform.staging")
MANIFEST = "manifest.json"
VERSION = 1
#: how long a transfer waits for another process's batch to be written before reading alone
LOCK_WAIT_SECONDS = 600.0
_LM = "__tp_staged_lm"  # a copy of the last-modified column, to tag windows by


class StagingUnavailable(Exception):
    """The staging folder cannot be used now (the transfer reads the source itself)."""


def query_hash(model: ModelConfig) -> str:
    """What the staged rows depend on: the model's relation and columns (a changed model never
    uses an older model's batch)."""
    text = json.dumps({"table": model.source_table, "query": model.source_query,
                       "org": model.organization_column,
                       "columns": [c.model_dump(mode="json") for c in model.columns]}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _now_epoch() -> float:
    return time.time()


@dataclass
class Batch:
    folder: Path
    manifest: dict[str, Any]

    @property
    def lower(self) -> datetime:
        return datetime.fromisoformat(self.manifest["lower"])

    @property
    def upper(self) -> datetime:
        return datetime.fromisoformat(self.manifest["upper"])

    @property
    def tick(self) -> str:
        return self.manifest["tick"]

    def load(self, tenant: str) -> pa.Table:
        """The tenant's staged rows (every column as the source returned it)."""
        entry = self.manifest["tenants"][tenant]
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(self.manifest["arrow_schema"])))
        if entry["file"] is None:
            return schema.empty_table()
        return pq.read_table(self.folder / entry["file"], schema=schema)


class StagingArea:
    """One model's staging folder (``<path>/<source>/<model>``)."""

    def __init__(self, source: PostgresSource, model: ModelConfig) -> None:
        assert source.staging is not None
        self.source, self.model = source, model
        self.root = Path(source.staging.path) / source.name / model.model_name
        self.max_age_seconds = source.staging.max_age_hours * 3600
        self.hash = query_hash(model)

    @contextlib.contextmanager
    def locked(self, wait_seconds: float = LOCK_WAIT_SECONDS) -> Iterator[None]:
        try:
            (self.root / "batches").mkdir(parents=True, exist_ok=True)
            (self.root / "demand").mkdir(exist_ok=True)
            handle = open(self.root / ".lock", "a+")  # noqa: SIM115 - held for the block
        except OSError as exc:
            raise StagingUnavailable(f"cannot use staging folder {self.root}: {exc}") from exc
        try:
            deadline = time.monotonic() + wait_seconds
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StagingUnavailable(f"staging folder {self.root} stayed locked for "
                                                 f"{wait_seconds:.0f} s") from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        finally:
            handle.close()

    # -- batches (call under the lock) -----------------------------------------------------------

    def batches(self) -> list[Batch]:
        found = []
        for folder in sorted((self.root / "batches").iterdir()):
            try:
                manifest = json.loads((folder / MANIFEST).read_text())
            except FileNotFoundError:
                continue  # unfinished (or being deleted): the sweep removes it once old
            found.append(Batch(folder, manifest))
        return found

    def sweep(self) -> None:
        """Delete batches (finished or not) older than ``max_age_hours`` and those nobody needs."""
        now = _now_epoch()
        for folder in (self.root / "batches").iterdir():
            try:
                manifest = json.loads((folder / MANIFEST).read_text())
                created, pending = manifest["created_epoch"], manifest["pending"]
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                # no manifest under the lock: its creator died before finishing (creators hold it)
                _LOG.info("staging: deleting unfinished batch %s", folder.name)
                shutil.rmtree(folder, ignore_errors=True)
                continue
            if now - created > self.max_age_seconds or not pending:
                _LOG.info("staging: deleting batch %s (%s)", folder.name,
                          "older than max_age_hours" if pending else "taken by every destination")
                shutil.rmtree(folder, ignore_errors=True)

    def _write_manifest(self, batch: Batch) -> None:
        tmp = batch.folder / f".{MANIFEST}.{uuid.uuid4().hex}"
        tmp.write_text(json.dumps(batch.manifest, sort_keys=True))
        os.replace(tmp, batch.folder / MANIFEST)

    def release(self, batch: Batch, destination: str) -> None:
        """``destination`` no longer needs ``batch``: its tenant's file goes if no other pending
        destination needs it, the batch when nobody does."""
        fresh = json.loads((batch.folder / MANIFEST).read_text()) if (batch.folder / MANIFEST).exists() else None
        if fresh is None:
            return
        tenant = fresh["pending"].pop(destination, None)
        if tenant is None:
            return
        if not fresh["pending"]:
            shutil.rmtree(batch.folder, ignore_errors=True)
            return
        entry = fresh["tenants"].get(tenant)
        if entry and entry["file"] and tenant not in fresh["pending"].values():
            (batch.folder / entry["file"]).unlink(missing_ok=True)
            entry["file"], entry["deleted"] = None, True
        batch.manifest = fresh
        self._write_manifest(batch)

    def find(self, destination: str, tick: str) -> Batch | None:
        """The batch of ``tick`` (same query) that ``destination`` is pending in; it is released
        from batches of other ticks."""
        mine = None
        for batch in self.batches():
            if destination not in batch.manifest["pending"]:
                continue
            if batch.tick == tick and batch.manifest["query_hash"] == self.hash and mine is None:
                mine = batch
            else:
                self.release(batch, destination)
        return mine

    def has_tick(self, tick: str) -> bool:
        return any(b.tick == tick and b.manifest["query_hash"] == self.hash for b in self.batches())

    # -- demand ----------------------------------------------------------------------------------

    def _demand_file(self, destination: str) -> Path:
        return self.root / "demand" / (hashlib.sha256(destination.encode()).hexdigest()[:24] + ".json")

    def record_demand(self, destination: str, lower: datetime) -> None:
        path = self._demand_file(destination)
        tmp = path.with_suffix(f".{uuid.uuid4().hex}.tmp")
        tmp.write_text(json.dumps({"destination": destination, "lower": isoformat(lower)}))
        os.replace(tmp, path)

    def demands(self) -> dict[str, datetime]:
        found = {}
        for path in (self.root / "demand").glob("*.json"):
            try:
                entry = json.loads(path.read_text())
                found[entry["destination"]] = datetime.fromisoformat(entry["lower"])
            except (OSError, ValueError, KeyError):
                continue
        return found

    def create(self, spark: SparkSession, reader: JdbcReader, tenants: dict[str, str], lowers: dict[str, datetime],
               upper: datetime, tick: str, destination: str) -> Batch:
        """Read the rows of every tenant of ``tenants`` (destination -> tenant) in one query from
        ``min(lowers)`` to ``upper`` and stage them, one Parquet file per tenant."""
        lower = min(lowers.values())
        ids = sorted(set(tenants.values()))
        frame = reader.read_tenants(spark, self.model, ids, lower, upper, destination)
        schema_json = frame.schema.json()
        try:
            table = frame.toArrow()
        except Exception as exc:
            from transfer_platform.connections import spark_error_reason

            raise StagingUnavailable(f"the staged read failed: {spark_error_reason(exc)}") from exc
        folder = self.root / "batches" / f"{upper.strftime('%Y%m%dT%H%M%S%f')}-{self.hash}-{uuid.uuid4().hex[:8]}"
        folder.mkdir()
        try:
            org = table.column(self.model.organization_column)
            keys = org if pa.types.is_string(org.type) else pc.cast(org, pa.string())
            entries = {}
            for i, tenant in enumerate(ids):
                rows = table.filter(pc.fill_null(pc.equal(keys, tenant), False))
                name = None
                if rows.num_rows:
                    name = f"t{i:05d}.parquet"
                    pq.write_table(rows, folder / name)
                entries[tenant] = {"file": name, "rows": rows.num_rows}
            manifest = {
                "version": VERSION, "source": self.source.name, "model": self.model.model_name,
                "query_hash": self.hash, "tick": tick, "lower": isoformat(lower), "upper": isoformat(upper),
                "created_epoch": _now_epoch(), "spark_schema": schema_json,
                "arrow_schema": base64.b64encode(table.schema.serialize().to_pybytes()).decode(),
                "tenants": entries, "pending": dict(sorted(tenants.items())),
                "lowers": {d: isoformat(v) for d, v in sorted(lowers.items())},
            }
            batch = Batch(folder, manifest)
            self._write_manifest(batch)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        _LOG.info("staging: batch %s of model %s: %d tenant(s), %d row(s), %s <= last_modified < %s",
                  folder.name, self.model.model_name, len(ids), table.num_rows, isoformat(lower), isoformat(upper))
        return batch


def tick_of(config: PlatformConfig, destination: str, now: datetime) -> str:
    """The schedule tick a transfer at ``now`` belongs to (the destinations due at it share a batch)."""
    frequency = config.destination(destination).frequency_minutes or DEFAULT_FREQUENCY_MINUTES
    return f"{frequency}@{isoformat(latest_tick(frequency, now))}"


def peers(config: PlatformConfig, source: str, model: ModelConfig, destination: str) -> dict[str, str]:
    """destination -> tenant, for every enabled destination receiving ``model`` (of ``source``)
    due at the same ticks as ``destination`` (the same frequency), ``destination`` included."""
    own = config.destination(destination)
    found = {}
    for d in config.destinations:
        if d.name != destination and (not d.is_enabled or d.frequency_minutes != own.frequency_minutes):
            continue
        if model.model_name not in {m.model_name for m in config.models_for(d)}:
            continue
        found[d.name] = config.recipient(d.recipient).id_in_provider_system
    return found


class StagedReader:
    """A tenant's rows of a batch, read as :class:`JdbcReader` reads them from the source (the
    same predicates, applied here; the same Spark types, then the model's casts). Loaded into this
    process once: a batch deleted meanwhile (max age) does not break the transfer."""

    counts_without_spark = True

    def __init__(self, inner: JdbcReader, batch: Batch, tenant: str) -> None:
        from pyspark.sql.types import StructType

        self.inner, self.batch, self.tenant = inner, batch, tenant
        self.source = inner.source
        self.table = batch.load(tenant)
        self.spark_schema = StructType.fromJson(json.loads(batch.manifest["spark_schema"]))

    def _frame(self, spark: SparkSession, table: pa.Table, extra: tuple[str, ...] = ()) -> DataFrame:
        from pyspark.sql.types import IntegerType, StructField, StructType

        fields = list(self.spark_schema.fields) + [StructField(name, IntegerType()) for name in extra]
        return spark.createDataFrame(table, schema=StructType(fields))

    def _inside(self, requests: list[ReadRequest]) -> pa.Table:
        """Rows with the change predicate of each request, tagged with it (NULL: the first)."""
        table = self.table.append_column(_LM, self.table.column(requests[0].model.last_modified.name_in_source))
        return in_bounds_tags(table, _LM, requests)

    def check(self, destination: str | None = None) -> None:
        return None  # the source is not read

    def check_read(self, spark: SparkSession, request: ReadRequest) -> None:
        frame = self._frame(spark, self.table.slice(0, 0))
        check_last_modified_type(frame, request, self.source.name)
        model_columns(frame, request, self.source.name, analyze=True)

    def read(self, spark: SparkSession, request: ReadRequest, *, with_origin: bool = False) -> DataFrame:
        rows = self._inside([request]).drop_columns([WINDOW_COLUMN])
        return model_columns(self._frame(spark, rows), request, self.source.name)

    def window_rows(self, spark: SparkSession, requests: list[ReadRequest], up_to: int) -> list[int] | None:
        if not requests:
            return []
        tags = self._inside(requests).column(WINDOW_COLUMN).to_pylist()
        return [min(tags.count(i), up_to) for i in range(len(requests))]

    def read_together(self, spark: SparkSession, requests: list[ReadRequest]) -> DataFrame:
        rows = self._inside(requests)
        return model_columns(self._frame(spark, rows, (WINDOW_COLUMN,)), requests[0], self.source.name,
                             keep=(WINDOW_COLUMN,))

    def tagged(self, table: pa.Table, requests: list[ReadRequest]) -> pa.Table:
        return table

    def keys_unique(self, request: ReadRequest) -> bool:
        return False  # each window's versions are resolved (the source's catalog is not asked)

    def count(self, spark: SparkSession, request: ReadRequest) -> int:
        return self._inside([request]).num_rows

    def probe(self, models, tenants, target):
        return self.inner.probe(models, tenants, target)


@dataclass
class TransferStaging:
    """Source staging for one incremental transfer of one model to one destination (the
    runner's side: ``transfers/runner.py``). Every method that touches the folder turns a failure
    into ONE warning and ``None``: the transfer then reads the source itself."""

    config: PlatformConfig
    area: StagingArea
    destination: str
    tenant: str
    tick: str
    log: Any
    broken: bool = False

    @classmethod
    def for_transfer(cls, config: PlatformConfig, model: ModelConfig, destination: str, now: datetime,
                     log: Any, *, tick: datetime | None = None) -> TransferStaging | None:
        source = config.source(model.source_name)
        if getattr(source, "staging", None) is None or source.tenancy != "multi_tenant":
            return None
        tenant = config.recipient(config.destination(destination).recipient).id_in_provider_system
        return cls(config, StagingArea(source, model), destination, tenant,
                   tick_of(config, destination, now) if tick is None else f"at@{isoformat(tick)}", log)

    def _failed(self, exc: BaseException) -> None:
        if not self.broken:
            self.log.warning(f"source staging of model '{self.area.model.model_name}' is unavailable for "
                             f"destination '{self.destination}' ({exc}); reading the source directly. "
                             f"Fix: make sources.{self.area.source.name}.staging.path a writable folder "
                             "with free space")
        self.broken = True

    def _guard(self, call, *args):
        if self.broken:
            return None
        try:
            return call(*args)
        except (OSError, StagingUnavailable, pa.ArrowException, ValueError, KeyError) as exc:
            self._failed(exc)
            return None

    def joined(self, inner: JdbcReader) -> StagedReader | None:
        """The batch of this tick this destination is pending in, as a reader, or ``None``."""
        def find() -> StagedReader | None:
            with self.area.locked():
                self.area.sweep()
                batch = self.area.find(self.destination, self.tick)
                return None if batch is None else StagedReader(inner, batch, self.tenant)
        return self._guard(find)

    def create_or_join(self, spark: SparkSession, inner: JdbcReader, lower: datetime,
                       now: datetime) -> StagedReader | None:
        """Under the lock: a batch of this tick that was written meanwhile and lists this
        destination, else (none of this tick yet) a new batch for this destination and its due
        peers with a demand; ``None`` when this tick's batch does not list it."""
        def create() -> StagedReader | None:
            with self.area.locked():
                self.area.sweep()
                batch = self.area.find(self.destination, self.tick)
                if batch is None:
                    if self.area.has_tick(self.tick):
                        return None
                    demands = self.area.demands()
                    tenants = {d: t for d, t in peers(self.config, self.area.source.name, self.area.model,
                                                      self.destination).items()
                               if d == self.destination or d in demands}
                    lowers = {d: demands[d] for d in tenants if d != self.destination}
                    lowers[self.destination] = lower
                    batch = self.area.create(spark, inner, tenants, lowers, now, self.tick, self.destination)
                return StagedReader(inner, batch, self.tenant)
        return self._guard(create)

    def release(self, reader: StagedReader) -> None:
        def release() -> None:
            with self.area.locked():
                self.area.release(reader.batch, self.destination)
        self._guard(release)

    def record(self, lower: datetime | None) -> None:
        """Record where this destination's next transfer reads from (its demand)."""
        if lower is None:
            return
        self._guard(self.area.record_demand, self.destination, lower)


def next_lower(windowing, state) -> datetime | None:
    """The lowest read bound of this model's next incremental transfer from ``state``: planned
    as it will be, a grid step (or a day) after the watermark."""
    from transfer_platform.core.planning import plan_windows

    if state is None or state.watermark is None:
        return None
    step = timedelta(seconds=windowing.grid.seconds if windowing.grid else 86_400)
    planned = plan_windows(windowing, now=state.watermark + step + timedelta(seconds=1), state=state)
    lowers = [p.bounds.lower for p in planned]
    return min(lowers) if lowers else state.watermark - timedelta(seconds=windowing.lookback_seconds)
