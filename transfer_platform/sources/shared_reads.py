"""Source staging: one read of a model's changed rows for every due recipient.

Off unless a PostgreSQL source sets ``staging: {path: <folder>, max_age_hours: 24}`` or
``staging: {s3: {bucket: ..., prefix: ...}, max_age_hours: 24}``. Without it every destination's
incremental transfer queries the source for its own tenant; with it, the transfers of one schedule
tick share a *batch*. The folder or bucket is an object store (``storage/stores.py``:
:class:`FolderStore`, :class:`BucketStore`), each object written whole; a model's objects are
under ``<source>/<model>/`` (in the folder, or under the bucket's prefix):

- **Batch.** ``batches/<id>/``: one Parquet object per tenant and a ``manifest.json`` naming the
  query's hash (model columns, relation, organization and last-modified columns), the tick, the
  read's bounds ``lower <= last_modified < upper`` (NULL values included), each tenant's object
  and the destinations still to take it (``pending``). It is written by ONE query (``org IN
  (...)``, every tenant id a quoted literal) and the manifest is written last: a batch without one
  is unfinished and ignored (the sweep removes it).
- **Lock.** Every change to the batches happens under the store's lock of the model (in a folder
  the ``flock`` of ``<source>/_locks/<model>.lock``; in a bucket the object
  ``<source>/<model>/lock.json``, created only if absent, taken over once its holder is gone), so
  separate processes (Dagster runs, CLI invocations, other machines sharing the bucket) see each
  other's batches. A batch's creator renews the lock before it writes: one that lost it (a read
  longer than the lease) writes nothing.
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
  tenant's object goes when no pending destination needs it, the batch when none is left (its
  manifest first). A destination found pending in an older tick's batch is removed from it. Any
  batch older than ``max_age_hours`` is deleted whatever is pending (the sweep runs under the
  lock at each use).
- **Failures.** A staging folder or bucket that cannot be read or written (missing mount, full
  disk, no rights, an unreachable endpoint, a missing bucket, a wrong key, a lock held too long)
  makes the transfer read the source itself after ONE warning; nothing is lost (the source read is
  the one without staging) and nothing is duplicated (upserts).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
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

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.schedule import DEFAULT_FREQUENCY_MINUTES, latest_tick
from transfer_platform.core.timeutil import isoformat
from transfer_platform.errors import ConfigError, ConnectionFailure, TransferRunning
from transfer_platform.sources.base import (
    WINDOW_COLUMN,
    ReadRequest,
    SourceReader,
    TenantsReader,
    check_last_modified_type,
    in_bounds_tags,
    model_columns,
)
from transfer_platform.storage.s3 import LostRace
from transfer_platform.storage.stores import BucketStore, FolderStore, Store
from transfer_platform.vendors.postgres import PostgresSource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


_LOG = logging.getLogger("transfer_platform.staging")
MANIFEST = "manifest.json"
VERSION = 1
#: how long a transfer waits for another process's batch to be written before reading alone
LOCK_WAIT_SECONDS = 600.0
_LM = "__tp_staged_lm"  # a copy of the last-modified column, to tag windows by
#: the S3 rights a staging bucket's key needs (docs/permissions.md)
BUCKET_RIGHTS = "s3:ListBucket, s3:GetObject, s3:PutObject and s3:DeleteObject"


class StagingUnavailable(Exception):
    """The staging folder or bucket cannot be used now (the transfer reads the source itself)."""


def query_hash(model: ModelConfig) -> str:
    """What the staged rows depend on: the model's relation and columns (a changed model never
    uses an older model's batch)."""
    text = json.dumps({"table": model.source_table, "query": model.source_query,
                       "org": model.organization_column,
                       "columns": [c.model_dump(mode="json") for c in model.columns]}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Batch:
    store: Store
    prefix: str  # the key of its folder, ending in '/'
    manifest: dict[str, Any]

    @property
    def name(self) -> str:
        return self.prefix.rstrip("/").rsplit("/", 1)[-1]

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
        data = self.store.get(self.prefix + entry["file"])
        if data is None:
            raise StagingUnavailable(f"the staged rows {self.prefix}{entry['file']} are gone")
        return pq.read_table(pa.BufferReader(data), schema=schema)


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


class StagingArea:
    """One model's staging: the objects under ``<source>/<model>/`` of the folder or bucket."""

    def __init__(self, source: PostgresSource, model: ModelConfig) -> None:
        assert source.staging is not None
        self.source, self.model, self.staging = source, model, source.staging
        bucket = self.staging.s3
        base = bucket.prefix.strip("/") if bucket is not None else ""
        self.books = "/".join(p for p in (base, source.name) if p)  # the locks' folder
        self.root = f"{self.books}/{model.model_name}"
        self.max_age_seconds = self.staging.max_age_hours * 3600
        self.hash = query_hash(model)
        self.holder = f"staging-{uuid.uuid4().hex[:12]}"
        self._store: Store | None = None

    @property
    def where(self) -> str:
        """The folder or bucket, for messages (never a secret)."""
        bucket = self.staging.s3
        if bucket is None:
            return f"folder {self.staging.path}"
        return (f"bucket {bucket.bucket} at {bucket.endpoint_url or f'AWS S3 ({bucket.region})'}, prefix "
                f"{bucket.prefix.strip('/') or '(none)'}")

    @property
    def store(self) -> Store:
        """The folder's or bucket's store, made at first use (a key's variable not set: unavailable)."""
        if self._store is None:
            try:
                self._store = (FolderStore(Path(self.staging.path)) if self.staging.s3 is None
                               else BucketStore(self.staging.s3, f"source '{self.source.name}'", at="staging.s3"))
            except ConfigError as exc:
                raise StagingUnavailable(str(exc)) from None
        return self._store

    @contextlib.contextmanager
    def locked(self, wait_seconds: float = LOCK_WAIT_SECONDS) -> Iterator[None]:
        store = self.store
        try:
            store.lock(self.books, self.model.model_name, self.holder, destination="staging",
                       wait_seconds=wait_seconds)
        except TransferRunning:
            raise StagingUnavailable(f"the staging {self.where} stayed locked for {wait_seconds:.0f} s by "
                                     "another transfer") from None
        except OSError as exc:
            raise StagingUnavailable(f"cannot lock the staging {self.where}: {exc}") from exc
        try:
            yield
        finally:
            store.release_all()

    def _renew(self) -> None:
        """Still the lock's holder (a bucket's lock is taken over once its lease is over)."""
        try:
            self.store.renew(self.model.model_name, self.holder)
        except LostRace:
            raise StagingUnavailable(f"the staging {self.where}: the lock was taken over while the batch "
                                     "was read (a read longer than the lock's lease)") from None

    # -- batches (call under the lock) -----------------------------------------------------------

    def _batch_keys(self) -> dict[str, list[str]]:
        """Each batch's folder key -> its objects' keys."""
        found: dict[str, list[str]] = {}
        under = f"{self.root}/batches/"
        for key in self.store.keys(under):
            name, slash, _ = key[len(under):].partition("/")
            if slash:
                found.setdefault(f"{under}{name}/", []).append(key)
        return found

    def _manifest(self, prefix: str) -> dict[str, Any] | None:
        data = self.store.get(prefix + MANIFEST)
        return None if data is None else json.loads(data)

    def batches(self) -> list[Batch]:
        found = []
        for prefix in sorted(self._batch_keys()):
            manifest = self._manifest(prefix)
            if manifest is None:
                continue  # unfinished (or being deleted): the sweep removes it
            found.append(Batch(self.store, prefix, manifest))
        return found

    def _drop(self, prefix: str, keys: list[str]) -> None:
        """Delete a batch: its manifest first (a batch part deleted is an unfinished one)."""
        manifest = prefix + MANIFEST
        self.store.delete([k for k in keys if k == manifest])
        self.store.delete([k for k in keys if k != manifest])
        if self.staging.s3 is None:  # a folder keeps its emptied folder (and a killed writer's file aside)
            shutil.rmtree(Path(self.staging.path) / prefix, ignore_errors=True)

    def sweep(self) -> None:
        """Delete batches (finished or not) older than ``max_age_hours`` and those nobody needs."""
        now = time.time()
        for prefix, keys in self._batch_keys().items():
            name = prefix.rstrip("/").rsplit("/", 1)[-1]
            try:
                manifest = self._manifest(prefix)
                created, pending = manifest["created_epoch"], manifest["pending"]
            except (TypeError, ValueError, KeyError):
                # no manifest under the lock: its creator died before finishing (creators hold it)
                _LOG.info("staging: deleting unfinished batch %s", name)
                self._drop(prefix, keys)
                continue
            if now - created > self.max_age_seconds or not pending:
                _LOG.info("staging: deleting batch %s (%s)", name,
                          "older than max_age_hours" if pending else "taken by every destination")
                self._drop(prefix, keys)

    def _write_manifest(self, batch: Batch) -> None:
        self.store.put(batch.prefix + MANIFEST, json.dumps(batch.manifest, sort_keys=True).encode())

    def release(self, batch: Batch, destination: str) -> None:
        """``destination`` no longer needs ``batch``: its tenant's object goes if no other pending
        destination needs it, the batch when nobody does."""
        fresh = self._manifest(batch.prefix)
        if fresh is None:
            return
        tenant = fresh["pending"].pop(destination, None)
        if tenant is None:
            return
        if not fresh["pending"]:
            self._drop(batch.prefix, self.store.keys(batch.prefix))
            return
        entry = fresh["tenants"].get(tenant)
        batch.manifest = fresh
        if entry and entry["file"] and tenant not in fresh["pending"].values():
            key = batch.prefix + entry["file"]
            entry["file"], entry["deleted"] = None, True
            self._write_manifest(batch)  # first: the manifest never names a deleted object
            self.store.delete([key])
        else:
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

    def _demand_key(self, destination: str) -> str:
        return f"{self.root}/demand/{hashlib.sha256(destination.encode()).hexdigest()[:24]}.json"

    def record_demand(self, destination: str, lower: datetime) -> None:
        self.store.put(self._demand_key(destination),
                       json.dumps({"destination": destination, "lower": isoformat(lower)}).encode())

    def demands(self) -> dict[str, datetime]:
        found = {}
        for key in self.store.keys(f"{self.root}/demand/"):
            try:
                entry = json.loads(self.store.get(key) or b"")
                found[entry["destination"]] = datetime.fromisoformat(entry["lower"])
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def create(self, spark: SparkSession, reader: TenantsReader, tenants: dict[str, str], lowers: dict[str, datetime],
               upper: datetime, tick: str, destination: str) -> Batch:
        """Read the rows of every tenant of ``tenants`` (destination -> tenant) in one query from
        ``min(lowers)`` to ``upper`` and stage them, one Parquet object per tenant."""
        lower = min(lowers.values())
        ids = sorted(set(tenants.values()))
        frame = reader.read_tenants(spark, self.model, ids, lower, upper, destination)
        schema_json = frame.schema.json()
        try:
            table = frame.toArrow()
        except Exception as exc:
            from transfer_platform.runtime.connections import spark_error_reason

            raise StagingUnavailable(f"the staged read failed: {spark_error_reason(exc)}") from exc
        self._renew()
        prefix = (f"{self.root}/batches/{upper.strftime('%Y%m%dT%H%M%S%f')}-{self.hash}-"
                  f"{uuid.uuid4().hex[:8]}/")
        written: list[str] = []
        try:
            org = table.column(self.model.organization_column)
            keys = org if pa.types.is_string(org.type) else pc.cast(org, pa.string())
            entries = {}
            for i, tenant in enumerate(ids):
                rows = table.filter(pc.fill_null(pc.equal(keys, tenant), False))
                name = None
                if rows.num_rows:
                    name = f"t{i:05d}.parquet"
                    written.append(prefix + name)
                    self.store.put(prefix + name, parquet_bytes(rows))
                entries[tenant] = {"file": name, "rows": rows.num_rows}
            manifest = {
                "version": VERSION, "source": self.source.name, "model": self.model.model_name,
                "query_hash": self.hash, "tick": tick, "lower": isoformat(lower), "upper": isoformat(upper),
                "created_epoch": time.time(), "spark_schema": schema_json,
                "arrow_schema": base64.b64encode(table.schema.serialize().to_pybytes()).decode(),
                "tenants": entries, "pending": dict(sorted(tenants.items())),
                "lowers": {d: isoformat(v) for d, v in sorted(lowers.items())},
            }
            batch = Batch(self.store, prefix, manifest)
            self._renew()
            self._write_manifest(batch)
        except BaseException:
            with contextlib.suppress(Exception):
                self._drop(prefix, written)
            raise
        _LOG.info("staging: batch %s of model %s: %d tenant(s), %d row(s), %s <= last_modified < %s",
                  batch.name, self.model.model_name, len(ids), table.num_rows, isoformat(lower), isoformat(upper))
        return batch


def _without_fix(exc: BaseException) -> str:
    """A failure's text without its "Fix:" (the warning gives the staging's own)."""
    text = str(exc)
    fix = getattr(exc, "fix", "")
    return text.removesuffix(f". Fix: {fix}") if fix else text


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


class StagedReader(SourceReader):
    """A tenant's rows of a batch, read as :class:`TenantsReader` reads them from the source (the
    same predicates, applied here; the same Spark types, then the model's casts). Loaded into this
    process once: a batch deleted meanwhile (max age) does not break the transfer."""

    counts_without_spark = True  # rows in this process already, made a frame for Spark's casts

    def __init__(self, inner: TenantsReader, batch: Batch, tenant: str) -> None:
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

    def count(self, spark: SparkSession, request: ReadRequest) -> int:
        return self._inside([request]).num_rows

    def probe(self, models, tenants, target):
        return self.inner.probe(models, tenants, target)


@dataclass
class TransferStaging:
    """Source staging for one incremental transfer of one model to one destination (the
    runner's side: ``transfers/runner.py``). Every method that touches the staging turns a failure
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
                             f"destination '{self.destination}' ({_without_fix(exc)}); reading the source "
                             f"directly. Fix: {self._fix(exc)}")
        self.broken = True

    def _fix(self, exc: BaseException) -> str:
        """What to mend, for a folder or a bucket (the S3 failure's own fix first: it names the field)."""
        source = f"sources.{self.area.source.name}.staging"
        if self.area.staging.s3 is None:
            return f"make {source}.path a writable folder with free space"
        rights = (f"the key of {source}.s3 needs {BUCKET_RIGHTS} in the {self.area.where}, on a store "
                  "that takes conditional writes (If-None-Match, If-Match); see docs/permissions.md")
        own = exc.fix if isinstance(exc, ConnectionFailure) and exc.fix else ""
        if "s3:GetObject" in own:
            return own
        return f"{own}; {rights}" if own else f"check {source}.s3 (bucket, endpoint_url, region, keys); {rights}"

    def _guard(self, call, *args):
        if self.broken:
            return None
        try:
            return call(*args)
        except (OSError, StagingUnavailable, ConnectionFailure, pa.ArrowException, ValueError, KeyError) as exc:
            self._failed(exc)
            return None

    def joined(self, inner: TenantsReader) -> StagedReader | None:
        """The batch of this tick this destination is pending in, as a reader, or ``None``."""
        def find() -> StagedReader | None:
            with self.area.locked():
                self.area.sweep()
                batch = self.area.find(self.destination, self.tick)
                return None if batch is None else StagedReader(inner, batch, self.tenant)
        return self._guard(find)

    def create_or_join(self, spark: SparkSession, inner: TenantsReader, lower: datetime,
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
