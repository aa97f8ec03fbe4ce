"""BigQuery destination: the SQL writer's algorithm (``destinations/sql/``) with
:class:`~.dialect.BigqueryDialect`'s statements, in one dataset (``connection.dataset``, the
recipient's, created beforehand), and what BigQuery does its own way:

- **the load**: a window is one CSV load job into a staging table (every column text, strings and
  JSON as JSON literals: :mod:`.dialect`), read typed through the dialect's ``decoded`` relation;
- **the commit** (:meth:`BigqueryWriter._atomically`, the one hook of a window's commit): no
  multi-statement transaction is used (the emulator the tests prove it on has none), so a window
  commits as two statements, each atomic, in this order: **one ``MERGE``** of its rows and soft
  deletes on the key with the last-modified tie-break, then **one ``MERGE`` of the status row**
  (its watermark). A reader sees the rows of a window at once; a transfer killed between the two
  leaves the rows merged and the watermark where it was: the next transfer reads the window again,
  and the merge, idempotent under the tie-break, changes nothing it already holds (re-delivered
  exactly, never lost, never doubled). Before writing, the hook renews the model's lock and
  refuses to commit if another transfer took it over;
- **a full refresh's publish**: ``CREATE OR REPLACE TABLE live AS SELECT * FROM aside`` (one
  atomic replace), then the state recorded and the refresh forgotten in one ``MERGE``;
- **the model's lock**: a row of ``_transfer_locks`` claimed with one ``MERGE`` (holder, expiry),
  renewed at each commit, released at ``close``, taken over when expired or when its holder, a
  process of this host, is dead;
- **the catalog**: the tables API (no query job for a table's existence or columns).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from transfer_platform.config.models import ModelConfig
from transfer_platform.destinations.base import (
    WindowLoad,
    arrow_schema,
    empty_frame,
    staging_suffix,
)
from transfer_platform.destinations.bigquery import dialect as sql
from transfer_platform.destinations.bigquery.client import (
    BigquerySession,
    first_line,
    make_client,
    retry,
    translated_errors,
)
from transfer_platform.destinations.bigquery.load import stage_frame, write_csv
from transfer_platform.destinations.sql.dialect import STAGING_PREFIX
from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable
from transfer_platform.errors import DataError, transfer_running
from transfer_platform.phases import log_phase
from transfer_platform.storage.locks import Lock, Locks, process_gone
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.bigquery import BigqueryDestination

if TYPE_CHECKING:
    import pyarrow as pa
    from google.cloud import bigquery
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.core.watermarks import ModelState
    from transfer_platform.probes import Check

#: a lock row not renewed for this long is taken over (a window's commit renews it)
LOCK_TTL_SECONDS = 900
#: between two claims of a held lock
LOCK_POLL_SECONDS = 0.5


@dataclass
class StagedWindow(StagingTable):
    """``name`` is the staging table of text; ``table`` the relation of its typed rows."""

    raw: str = ""
    loaded_bytes: int = 0


class LockRow(Lock):
    """A model's lock as its row of ``_transfer_locks``: claimed by one ``MERGE`` when free,
    expired, ours, or held by a holder found dead (:meth:`BigqueryWriter._dead`); renewed by each
    commit (:meth:`BigqueryWriter._atomically`)."""

    poll_seconds, then = LOCK_POLL_SECONDS, None  # the refusal ends at "run this one again"

    def __init__(self, writer: BigqueryWriter, model: str) -> None:
        self.writer, self.model = writer, model
        self._takeover: str | None = None  # a dead holder, replaced by the next claim
        self._row: tuple | None = None  # the row as last read: holder, expiry

    def take(self, within: float) -> bool:
        """Claim the row (one ``MERGE``; of two at once BigQuery fails one), then read it: ours?"""
        w = self.writer
        with contextlib.suppress(_concurrent_update()):
            w.session.execute(w.dialect.claim_lock(w.locks_table, self.model, w._holder, LOCK_TTL_SECONDS,
                                                   self._takeover))
        self._row = w.session.one(w.dialect.lock_holder(w.locks_table, self.model))
        return bool(self._row) and self._row[0] == w._holder

    def take_over(self) -> bool:
        holder = self._row[0] if self._row else None
        if holder is not None and self.writer._dead(holder):
            self._takeover = holder
            return True
        return False

    def holder(self) -> str:
        return (f"lock row of {sql.LOCKS_TABLE} held by {self._row[0] if self._row else None}, until "
                f"{self._row[1] if self._row else '?'} unless renewed")

    def renew(self) -> None:
        w = self.writer
        w.session.execute(w.dialect.claim_lock(w.locks_table, self.model, w._holder, LOCK_TTL_SECONDS, None))
        self._row = w.session.one(w.dialect.lock_holder(w.locks_table, self.model))
        if not self._row or self._row[0] != w._holder:
            raise transfer_running(
                self.model, self.writer.name, f"this transfer's lock expired and another transfer holds it "
                f"({self._row[0] if self._row else 'none'}); nothing of this window was committed",
                "run the transfer again once the other one ends")

    def release(self) -> None:
        w = self.writer
        w.session.execute(w.dialect.release_lock(w.locks_table, self.model, w._holder))


class BigqueryWriter(SqlWriter):
    DIALECT = sql.BigqueryDialect()

    def __init__(self, destination: BigqueryDestination, tuning: Tuning = DEFAULT) -> None:
        c = destination.connection
        super().__init__(destination, tuning, container=f"{c.project}.{c.dataset}",
                         what=f"BigQuery destination '{destination.name}' (project {c.project}, dataset {c.dataset})")
        self._client: bigquery.Client | None = None
        self._holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._locked = Locks()

    # -- the client ------------------------------------------------------------------------------

    @property
    def client(self) -> bigquery.Client:
        if self._client is None:
            with self._translated_errors():
                self._client = make_client(self.destination)
        return self._client

    @property
    def session(self) -> BigquerySession:
        return BigquerySession(self.client)

    def _translated_errors(self) -> contextlib.AbstractContextManager[None]:
        return translated_errors(self.destination, self.what, self._client)

    def check(self) -> None:
        with self._translated_errors():
            self.client.get_dataset(self.container, retry=retry())

    def close(self) -> None:
        """Release the models' lock rows, then the client."""
        if self._client is not None:
            self._locked.release_all()  # a row not released now expires
            self._client.close()
            self._client = None
        self._locked.clear()

    @property
    def locks_table(self) -> str:
        return self.dialect.qualified(self.container, sql.LOCKS_TABLE)

    # -- the catalog: the tables API -------------------------------------------------------------

    def _table_id(self, name: str) -> str:
        return f"{self.container}.{name}"

    def _get_table(self, name: str) -> Any:
        from google.api_core.exceptions import NotFound

        try:
            return self.client.get_table(self._table_id(name), retry=retry())
        except NotFound as exc:
            if "Dataset" in str(exc):
                raise
            return None

    def _exists(self, name: str) -> bool:
        return self._get_table(name) is not None

    def _columns(self, name: str) -> dict[str, str]:
        table = self._get_table(name)
        return {} if table is None else {f.name: f.field_type for f in table.schema}

    def _primary_key(self, name: str) -> list[str]:
        """BigQuery keeps no table constraint: a live table's key is the one recorded in its
        status row (``primary_key``, recorded when the table is first planned, and by a full
        refresh's publish); a refresh's table aside has its model's."""
        model = self._models.get(name)
        if model is None:
            return []
        wanted = _key_text(model)
        if name == model.model_name:
            self._ensure_status_row(model)
            row = self.session.one(self.dialect.read_primary_key(self.status_table, model.model_name))
            if row is not None and row[0] is not None:
                return json.loads(row[0])
            self.session.execute(self.dialect.record_primary_key(self.status_table, model.model_name, wanted))
        return json.loads(wanted)

    @property
    def _models(self) -> dict[str, ModelConfig]:
        return self.__dict__.setdefault("_known_models", {})

    def _remember(self, model: ModelConfig) -> None:
        self._models[model.model_name] = model
        self._models[self.refresh_table_name(model)] = model

    # -- prepare's steps -------------------------------------------------------------------------

    def _create_container(self) -> None:
        """The dataset must exist (the recipient's); the locks' table is created if missing."""
        self.client.get_dataset(self.container, retry=retry())
        self.session.execute(self.dialect.locks_ddl(self.locks_table))

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """The model's lock row claimed (one ``MERGE``); a held one is waited for up to
        ``Tuning.lock_wait_seconds``, then refused naming its holder."""
        self._remember(model)
        if model.model_name in self._locked:
            return
        with self._translated_errors():
            self.session.execute(self.dialect.locks_ddl(self.locks_table))
            self._locked.hold(model.model_name, LockRow(self, model.model_name), destination=self.name,
                              wait_seconds=self.tuning.lock_wait_seconds)

    @staticmethod
    def _dead(holder: str) -> bool:
        """A holder of this host whose process is gone (killed: its lock is taken over at once)."""
        host, _, rest = holder.partition(":")
        pid = rest.partition(":")[0]
        return pid.isdigit() and process_gone(host, int(pid))

    def _clean_staging(self, model: ModelConfig) -> None:
        prefix = STAGING_PREFIX + staging_suffix(model.model_name, "")
        with self._translated_errors():
            for table in self.client.list_tables(self.container, retry=retry()):
                if table.table_id.startswith(prefix):
                    self.session.execute(self.dialect.drop_table(self.dialect.qualified(self.container, table.table_id)))
                    log_phase("clean up", transfer_id="(a dead transfer)", destination=self.name,
                              model=model.model_name, staging_table=table.table_id, left_by_a_dead_transfer=True)

    def _read_states(self, model: ModelConfig) -> tuple[ModelState, Any]:
        self._remember(model)
        return super()._read_states(model)

    def _begin_refresh(self, model: ModelConfig, live: ModelState) -> ModelState:
        """The old refresh forgotten first (no state ever points at a table emptied), the table
        aside replaced, then the new progress recorded."""
        from transfer_platform.core.watermarks import ModelState

        state = ModelState(high_watermark=live.high_watermark)
        aside = self.refresh_table(model)
        with self._translated_errors():
            self._ensure_status_row(model)
            self._set_state(model, "refresh_state", None)
            self.session.execute(self.dialect.drop_table(aside))
            self.session.execute(self.dialect.target_ddl(aside, model))
            self._set_state(model, "refresh_state", state)
        return state

    # -- a window: one load job, one MERGE, one status MERGE ---------------------------------------

    def _create_staging(self, load: WindowLoad, *, in_memory: bool) -> StagedWindow:
        model = load.model
        target_name = self.refresh_table_name(model) if load.into_refresh else model.model_name
        name = self.staging_table_name(model, load.transfer_id)
        raw = self.dialect.qualified(self.container, name)
        staging = StagedWindow(name, sql.decoded(raw, model.columns), target_name,
                               self.dialect.qualified(self.container, target_name), raw=raw)
        with self._translated_errors():
            self.session.execute(self.dialect.drop_table(raw))
            self.session.execute(self.dialect.staging_ddl(raw, staging.target, model, None, logged=False))
        return staging

    def _stage_frame(self, frame: DataFrame, staging: StagedWindow, load: WindowLoad) -> StagedWindow:
        staging.loaded_bytes = self._load_spark(frame, staging.name, load.model, list(load.model.columns))
        return self._staged(staging, load)

    def _stage_arrow(self, batch: pa.Table, staging: StagedWindow, load: WindowLoad) -> StagedWindow:
        columns = list(load.model.columns)
        with tempfile.TemporaryDirectory(prefix="tp_bigquery_") as folder:
            path = os.path.join(folder, "window.csv")
            size = write_csv([batch], _pairs(columns), path)
            staging.loaded_bytes = self._load(path, size, staging.name, load.model, columns)
        return self._staged(staging, load)

    def _load_spark(self, frame: DataFrame, name: str, model: ModelConfig | None, columns: list) -> int:
        """Spark's executors write the rows as CSV parts (``load.stage_frame``), joined into one
        file here, appended to ``name`` by one load job."""
        with tempfile.TemporaryDirectory(prefix="tp_bigquery_") as folder:
            path = os.path.join(folder, "window.csv")
            selected = frame.select(*["`" + c.destination_name.replace("`", "``") + "`" for c in columns])
            size = stage_frame(selected, _pairs(columns), folder, path)
            return self._load(path, size, name, model, columns)

    def _load(self, path: str, size: int, name: str, model: ModelConfig | None, columns: list) -> int:
        """The CSV file ``path`` appended to the staging table ``name`` by one load job."""
        from google.api_core.exceptions import BadRequest
        from google.cloud import bigquery

        if size == 0:
            return 0
        config = bigquery.LoadJobConfig(
            source_format=bigquery.SourceFormat.CSV, write_disposition=bigquery.WriteDisposition.WRITE_APPEND,
            schema=[bigquery.SchemaField(c.destination_name, "STRING") for c in columns])
        with self._translated_errors(), open(path, "rb") as file:
            job = self.client.load_table_from_file(file, self._table_id(name), job_config=config)
            try:
                job.result(retry=retry())
            except BadRequest as exc:
                raise DataError(f"the load job into the staging table failed: {first_line(exc)}",
                                model=model.model_name if model else "(none)", destination=self.name,
                                fix="check that each column's data_type matches the source values") from None
        return size

    def _load_frame(self, frame: DataFrame, staging: str, model: ModelConfig) -> None:
        raise NotImplementedError("BigQuery stages through _stage_frame")

    def _load_arrow(self, batch: pa.Table, staging: str, load: WindowLoad) -> None:
        raise NotImplementedError("BigQuery stages through _stage_arrow")

    def _refuse(self, staging: StagedWindow, load: WindowLoad) -> None:
        super()._refuse(staging, load)
        staging.volume = staging.volume or staging.loaded_bytes

    def _remove_staging(self, staging: StagedWindow, load: WindowLoad) -> None:
        with self._translated_errors():
            self.session.execute(self.dialect.drop_table(staging.raw))
        log_phase("clean up", transfer_id=load.transfer_id, destination=self.name, model=load.model.model_name,
                  staging_table=staging.name)

    @contextmanager
    def _atomically(self, load: WindowLoad | None = None) -> Iterator[None]:
        """The hook of a window's commit (and a refresh's publish). BigQuery's statements each
        commit alone; the SQL writer's commit runs, in this order, the window's one ``MERGE``
        (rows and soft deletes at once) and the status row's ``MERGE`` (the watermark): a crash
        between them re-delivers the window, exactly, on the next run (see the module). Here: the
        model's lock renewed, and the commit refused if another transfer holds it now."""
        model = load.model if load is not None else None
        for name in [model.model_name] if model is not None else list(self._locked):
            LockRow(self, name).renew()
        yield

    def _merge(self, load: WindowLoad, staging: StagedWindow) -> int:
        """The window's one ``MERGE`` (rows and soft deletes); the rows deleted (counted first)."""
        model = load.model
        marker, skip, rows_deleted = model.deletion_marker, None, staging.marked
        if staging.rows == 0:
            return 0 if model.removes_deleted_rows else rows_deleted
        if model.removes_deleted_rows:
            skip = self.dialect.marked(marker.destination_name, marker.data_type, "s")
            rows_deleted = int(self.session.one(self.dialect.soft_deleted(staging.target, staging.table, model))[0])
        try:
            for statement in self.dialect.upsert(staging.target, staging.table, model, skip):
                self.session.execute(statement)
        except _bad_request() as exc:
            raise DataError(f"BigQuery refused the window's rows: {first_line(exc)}", model=model.model_name,
                            destination=self.name, fix="check that each column's data_type matches the source "
                            "values (a json column must hold valid JSON text)") from None
        return rows_deleted

    # -- the full refresh's publish --------------------------------------------------------------

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        """The live table replaced by a copy of the one built aside (one atomic statement), then
        the state recorded and the refresh forgotten (one ``MERGE``), then the aside dropped. Killed
        before the record, the next transfer finds the refresh complete aside and publishes it again."""
        aside = self.refresh_table(model)
        self.session.execute(self.dialect.replace_table(self.table(model), aside))
        self.session.execute(self.dialect.publish_state(self.status_table, model.model_name, state.watermark,
                                                        state.high_watermark, state.to_json(), transfer_id,
                                                        primary_key=_key_text(model)))
        self.session.execute(self.dialect.drop_table(aside))

    # -- outside a transfer's windows ------------------------------------------------------------

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        """The rows whose key and last-modified value ``frame`` holds removed (one load job, one
        ``DELETE``)."""
        self._remember(model)
        chosen = [*model.primary_key, model.last_modified]
        names = [c.destination_name for c in chosen]
        name = self.staging_table_name(model, transfer_id)
        raw = self.dialect.qualified(self.container, name)
        with self._translated_errors():
            self.session.execute(self.dialect.drop_table(raw))
            self.session.execute(self.dialect.staging_ddl(raw, self.table(model), model, chosen, logged=False))
            try:
                if self._load_spark(frame, name, model, chosen) == 0:
                    return 0
                return self.session.execute(self.dialect.delete_matching(self.table(model), sql.decoded(raw, chosen),
                                                                         names))
            finally:
                self.session.execute(self.dialect.drop_table(raw))

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """The table read into this process (JSON as its text, NUMERIC exactly), then handed to
        Spark: fine for millions of rows, not for a table beyond the driver's memory."""
        import pyarrow as pa

        from transfer_platform.destinations.bigquery.load import read_rows

        with self._translated_errors():
            if not self._exists(model.model_name):
                return empty_frame(spark, model)
            rows = read_rows(self.session, self.table(model), list(model.columns))
        table = pa.Table.from_pylist(rows, schema=arrow_schema(model))
        return spark.createDataFrame(table) if table.num_rows else empty_frame(spark, model)

    def probe(self, models: list[ModelConfig], target: str) -> list[Check]:
        from transfer_platform.destinations.bigquery.probe import probe_destination

        return probe_destination(self, models, target)


def _key_text(model: ModelConfig) -> str:
    """The model's primary key as recorded: its columns, sorted, as a JSON list."""
    return json.dumps(sorted(c.destination_name for c in model.primary_key))


def _pairs(columns: list) -> list[tuple[str, str]]:
    return [(c.destination_name, c.data_type) for c in columns]


def _bad_request() -> type[Exception]:
    from google.api_core.exceptions import BadRequest

    return BadRequest


def _concurrent_update() -> type[Exception]:
    """Two ``MERGE``s of one table at once: BigQuery fails one (it is claimed again)."""
    from google.api_core.exceptions import BadRequest

    return BadRequest
