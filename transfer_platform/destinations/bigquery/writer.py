"""BigQuery destination: the SQL writer with :class:`~.dialect.BigqueryDialect`, in one dataset (the
recipient's, created beforehand). Its own ways (docs/destinations.md): a window is one CSV load job
into a staging table of text, read typed through ``decoded``; its commit is one ``MERGE`` of the
rows, then one of the status row (:meth:`BigqueryWriter._atomically`); a refresh is published by
``CREATE OR REPLACE TABLE``; a model's lock is a row of ``_transfer_locks``; the catalog is read
through the tables API."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from transfer_platform import errors
from transfer_platform.config.models import ColumnConfig, ModelConfig
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations import base
from transfer_platform.destinations.bigquery import client as bq
from transfer_platform.destinations.bigquery import dialect as sql
from transfer_platform.destinations.bigquery.load import stage_frame, write_csv
from transfer_platform.destinations.sql.dialect import STAGING_PREFIX
from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable
from transfer_platform.phases import log_phase
from transfer_platform.probes import ProbePlan, Step
from transfer_platform.storage.locks import LeaseLock, Locks, process_gone
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.bigquery import BigqueryDestination

if TYPE_CHECKING:
    import pyarrow as pa
    from google.cloud import bigquery
    from pyspark.sql import DataFrame, SparkSession

    from transfer_platform.destinations.base import WindowLoad

TYPES_FIX = "check that each column's data_type matches the source values"


@dataclass
class StagedWindow(StagingTable):
    """``table`` is the relation of the typed rows read from ``raw``, the staging table of text."""

    raw: str = ""
    loaded_bytes: int = 0


class LockRow(LeaseLock):
    """A model's row of ``_transfer_locks`` (:attr:`held`: holder, expiry); renewed by each commit."""

    poll_seconds, then = 0.5, None  # between two claims; the refusal ends at "run this one again"

    def __init__(self, writer: BigqueryWriter, model: str) -> None:
        self.writer, self.model = writer, model
        self._takeover: str | None = None  # a dead holder, replaced by the next claim

    def _claim(self, takeover: str | None, tolerated: tuple[type[Exception], ...] = ()) -> bool:
        w = self.writer
        with contextlib.suppress(*tolerated):
            w.session.execute(w.dialect.claim_lock(w.locks_table, self.model, w._holder, self.lease_seconds, takeover))
        self.held = w.session.one(w.dialect.lock_holder(w.locks_table, self.model))
        return bool(self.held) and self.held[0] == w._holder

    def take(self, within: float) -> bool:
        from google.api_core.exceptions import BadRequest

        return self._claim(self._takeover, (BadRequest,))  # of two MERGEs at once BigQuery fails one

    def read(self) -> tuple | None:  # the row the claim read back
        return self.held

    def gone(self, held: tuple) -> bool:  # host:pid:writer, a process of this host that is gone (expiry: the claim's)
        host, _, rest = (held[0] or "").partition(":")
        pid = rest.partition(":")[0]
        return pid.isdigit() and process_gone(host, int(pid))

    def clear(self, held: tuple) -> None:
        self._takeover = held[0]

    def holder(self) -> str:
        holder, until = self.held or (None, "?")
        return f"lock row of {sql.LOCKS_TABLE} held by {holder}, until {until} unless renewed"

    def renew(self) -> None:
        if not self._claim(None):
            raise errors.transfer_running(
                self.model, self.writer.name, f"this transfer's lock expired and another transfer holds it "
                f"({self.held[0] if self.held else 'none'}); nothing of this window was committed",
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
        self._models: dict[str, ModelConfig] = {}  # by table name: the live table's and the one aside
        self.locks_table = self.dialect.qualified(self.container, sql.LOCKS_TABLE)

    @property
    def client(self) -> bigquery.Client:
        if self._client is None:
            with self._translated_errors():
                self._client = bq.make_client(self.destination)
        return self._client

    @property
    def session(self) -> bq.BigquerySession:
        return bq.BigquerySession(self.client)

    _translated_errors = bq.translated_errors

    def check(self) -> None:  # the dataset is the recipient's: nothing is created
        with self._translated_errors():
            self.client.get_dataset(self.container, retry=bq.retry())

    _create_container = check

    def close(self) -> None:
        if self._client is not None:
            self._locked.release_all()  # a row not released now expires
            self._client.close()
            self._client = None
        self._locked.clear()

    # -- the catalog: the tables API (the emulator has no INFORMATION_SCHEMA) -----------------------

    def _get_table(self, name: str) -> Any:
        from google.api_core.exceptions import NotFound

        try:
            return self.client.get_table(f"{self.container}.{name}", retry=bq.retry())
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
        """BigQuery keeps no key: a live table's is its status row's (recorded when first planned and
        by a refresh's publish); a table aside has its model's."""
        model = self._models.get(name)
        if model is None:
            return []
        if name == model.model_name:
            self._ensure_status_row(model)
            row = self.session.one(self.dialect.read_primary_key(self.status_table, name))
            if row is not None and row[0] is not None:
                return json.loads(row[0])
            self.session.execute(self.dialect.record_primary_key(self.status_table, name, _key_text(model)))
        return json.loads(_key_text(model))

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        if model.model_name in self._locked:
            return
        with self._translated_errors():
            self.session.execute(self.dialect.locks_ddl(self.locks_table))
            self._locked.hold(model.model_name, LockRow(self, model.model_name), destination=self.name,
                              wait_seconds=self.tuning.lock_wait_seconds)

    def _clean_staging(self, model: ModelConfig) -> None:
        prefix = STAGING_PREFIX + base.staging_suffix(model.model_name, "")
        with self._translated_errors():
            for table in self.client.list_tables(self.container, retry=bq.retry()):
                if table.table_id.startswith(prefix):
                    self.session.execute(self.dialect.drop_table(self.dialect.qualified(self.container, table.table_id)))
                    log_phase("clean up", transfer_id="(a dead transfer)", destination=self.name,
                              model=model.model_name, staging_table=table.table_id, left_by_a_dead_transfer=True)

    def _read_states(self, model: ModelConfig) -> tuple[ModelState, Any]:
        self._models.update({model.model_name: model, self.refresh_table_name(model): model})
        return super()._read_states(model)

    def _begin_refresh(self, model: ModelConfig, live: ModelState) -> ModelState:
        # the old refresh forgotten first: each statement commits alone, no state may point at a table emptied
        state, aside = ModelState(high_watermark=live.high_watermark), self.refresh_table(model)
        with self._translated_errors():
            self._ensure_status_row(model)
            self._set_state(model, "refresh_state", None)
            self.session.execute(self.dialect.drop_table(aside))
            self.session.execute(self.dialect.target_ddl(aside, model))
            self._set_state(model, "refresh_state", state)
        return state

    # -- a window: one load job, one MERGE, one status MERGE ---------------------------------------

    def _create_staging(self, load: WindowLoad, *, in_memory: bool) -> StagingTable:
        staging = self._staging_for(load, StagedWindow)
        staging.raw, staging.table = staging.table, self.dialect.decoded(staging.table, load.model.columns)
        self._create_raw(staging.raw, load.model.columns)
        return staging

    def _create_raw(self, raw: str, columns: list[ColumnConfig]) -> None:
        with self._translated_errors():
            self.session.execute(self.dialect.drop_table(raw))
            self.session.execute(self.dialect.staging_ddl(raw, raw, None, columns, logged=False))

    def _stage_frame(self, rows: DataFrame | pa.Table, staging: StagedWindow, load: WindowLoad) -> StagedWindow:
        staging.loaded_bytes = self._load(staging.name, load.model, load.model.columns, rows)
        return self._staged(staging, load)

    _stage_arrow = _stage_frame

    def _load(self, name: str, model: ModelConfig | None, columns: list[ColumnConfig], rows: DataFrame | pa.Table
              ) -> int:
        """The rows as one CSV file appended to ``name`` by one load job; its size in bytes."""
        import pyarrow as pa
        from google.api_core.exceptions import BadRequest
        from google.cloud import bigquery

        pairs = [(c.destination_name, c.data_type) for c in columns]
        with tempfile.TemporaryDirectory(prefix="tp_bigquery_") as folder:
            path = os.path.join(folder, "window.csv")
            if isinstance(rows, pa.Table):
                size = write_csv([rows], pairs, path)
            else:
                size = stage_frame(rows.select(*[f"`{n.replace('`', '``')}`" for n, _ in pairs]), pairs, folder, path)
            if size == 0:
                return 0
            config = bigquery.LoadJobConfig(
                source_format=bigquery.SourceFormat.CSV, write_disposition=bigquery.WriteDisposition.WRITE_APPEND,
                schema=[bigquery.SchemaField(n, "STRING") for n, _ in pairs])
            with self._translated_errors(), open(path, "rb") as file:
                job = self.client.load_table_from_file(file, f"{self.container}.{name}", job_config=config)
                try:
                    job.result(retry=bq.retry())
                except BadRequest as exc:
                    raise errors.DataError(f"the load job into the staging table failed: {bq.first_line(exc)}",
                                           model=model.model_name if model else "(none)", destination=self.name,
                                           fix=TYPES_FIX) from None
        return size

    def _refuse(self, staging: StagedWindow, load: WindowLoad) -> None:
        super()._refuse(staging, load)
        staging.volume = staging.volume or staging.loaded_bytes

    def _remove_staging(self, staging: StagedWindow, load: WindowLoad) -> None:
        super()._remove_staging(StagingTable(staging.name, staging.raw, staging.target_name, staging.target), load)

    @contextlib.contextmanager
    def _atomically(self, load: WindowLoad | None = None) -> Iterator[None]:
        """The model's lock renewed. Each statement commits alone: killed between the window's
        ``MERGE`` and the status row's, the next transfer reads the window again and the merge,
        idempotent under the tie-break, re-delivers it exactly."""
        for name in [load.model.model_name] if load is not None else list(self._locked):
            LockRow(self, name).renew()
        yield

    def _merge(self, load: WindowLoad, staging: StagingTable) -> int:
        from google.api_core.exceptions import BadRequest

        try:
            return super()._merge(load, staging)
        except BadRequest as exc:
            raise errors.DataError(f"BigQuery refused the window's rows: {bq.first_line(exc)}",
                                   model=load.model.model_name, destination=self.name,
                                   fix=f"{TYPES_FIX} (a json column must hold valid JSON text)") from None

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        """Killed before the state's record, the next transfer finds the refresh complete aside and
        publishes it again."""
        aside = self.refresh_table(model)
        self.session.execute(self.dialect.replace_table(self.table(model), aside))
        self.session.execute(self.dialect.record_state(self.status_table, model.model_name, state.watermark,
                                                       state.high_watermark, state.to_json(), transfer_id,
                                                       published_key=_key_text(model)))
        self.session.execute(self.dialect.drop_table(aside))

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        chosen = [*model.primary_key, model.last_modified]
        name = self.staging_table_name(model, transfer_id)
        raw = self.dialect.qualified(self.container, name)
        self._create_raw(raw, chosen)
        with self._translated_errors():
            try:
                if self._load(name, model, chosen, frame) == 0:
                    return 0
                return self.session.execute(self.dialect.delete_matching(
                    self.table(model), self.dialect.decoded(raw, chosen), [c.destination_name for c in chosen]))
            finally:
                self.session.execute(self.dialect.drop_table(raw))

    def read_table(self, spark: SparkSession, model: ModelConfig) -> DataFrame:
        """Read through this process: fine for millions of rows, not beyond the driver's memory."""
        import pyarrow as pa

        with self._translated_errors():
            if not self._exists(model.model_name):
                return base.empty_frame(spark, model)
            rows = self.session.all(self.dialect.read_rows(self.table(model), model.columns))
        table = pa.Table.from_pylist([{c.destination_name: Decimal(v) if c.data_type == "decimal" and v is not None
                                       else v for c, v in zip(model.columns, row, strict=True)} for row in rows],
                                     schema=base.arrow_schema(model))
        return spark.createDataFrame(table) if table.num_rows else base.empty_frame(spark, model)

    def _probe_plan(self, models: list[ModelConfig], name: str) -> ProbePlan:
        """A transfer's steps tried on a probe table dropped at once."""
        import pyarrow as pa
        from google.api_core import exceptions as api

        c, table = self.destination.connection, self.dialect.qualified(self.container, name)
        column = ColumnConfig.model_validate({"name_in_source": "id", "data_type": "string"})

        def fix(exc: Exception) -> str:
            refused = bq.missing_role(self, bq.first_line(exc)) if isinstance(exc, api.Forbidden) else exc
            return getattr(refused, "grant", "check the job's error in BigQuery")

        steps = [Step(f"create and drop tables ({bq.DATASET_ROLE} on the dataset; queries need {bq.PROJECT_ROLE})", fix,
                      [self.dialect.staging_ddl(table, table, None, [column], logged=False)]),
                 Step(f"load rows with a load job ({bq.PROJECT_ROLE} on the project)", fix,
                      [lambda: self._load(name, None, [column], pa.table({"id": ["probe"]}))]),
                 Step("merge and delete rows (DML)", fix,
                      [self.dialect.delete_matching(table, "(SELECT 'probe' AS id)", ["id"])])]
        return ProbePlan(
            f"reach dataset {c.project}.{c.dataset} with the configured credentials", self.check,
            lambda exc: getattr(exc, "fix", None) or getattr(exc, "grant", None) or bq.CONNECT_FIX, steps,
            (api.GoogleAPIError, errors.MissingPrivilege), bq.first_line, cleanup=[self.dialect.drop_table(table)],
            endpoint=bq.endpoint(self.destination), unreachable="the endpoint cannot be reached",
            login_errors=(errors.ConnectionFailure, errors.ConfigError, errors.MissingPrivilege),
            no_login="the dataset cannot be reached")


def _key_text(model: ModelConfig) -> str:
    return json.dumps(sorted(c.destination_name for c in model.primary_key))
