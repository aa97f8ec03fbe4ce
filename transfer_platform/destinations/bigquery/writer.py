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
from typing import TYPE_CHECKING

from transfer_platform import errors
from transfer_platform.config.models import ColumnConfig, ModelConfig
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.bigquery import client as bq
from transfer_platform.destinations.bigquery import dialect as sql
from transfer_platform.destinations.bigquery.load import stage_frame, write_csv
from transfer_platform.destinations.sql.dialect import LOCKS_TABLE
from transfer_platform.destinations.sql.session import BigquerySession, bigquery_retry
from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable
from transfer_platform.probes import ProbePlan, Step
from transfer_platform.storage.locks import LeaseLock, process_gone
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform.vendors.bigquery import BigqueryDestination

if TYPE_CHECKING:
    import pyarrow as pa
    from google.cloud import bigquery
    from pyspark.sql import DataFrame

    from transfer_platform.destinations.base import WindowLoad

TYPES_FIX = "check that each column's data_type matches the source values"


class LockRow(LeaseLock):
    """A model's row of ``_transfer_locks`` (:attr:`held`: holder, expiry); renewed by each commit."""

    poll_seconds, then = 0.5, None  # between two claims; the refusal ends at "run this one again"

    def __init__(self, writer: BigqueryWriter, model: str) -> None:
        self.writer, self.model = writer, model

    def _claim(self, tolerated: tuple[type[Exception], ...] = ()) -> bool:
        w = self.writer
        with contextlib.suppress(*tolerated):
            w.session.execute(w.dialect.claim_lock(w.locks_table, self.model, w._holder, self.lease_seconds))
        self.held = w.session.one(w.dialect.lock_holder(w.locks_table, self.model))
        return bool(self.held) and self.held[0] == w._holder

    def take(self, within: float) -> bool:
        from google.api_core.exceptions import BadRequest

        return self._claim((BadRequest,))  # of two MERGEs at once BigQuery fails one

    def read(self) -> tuple | None:  # the row the claim read back
        return self.held

    def gone(self, held: tuple) -> bool:  # host:pid:writer, a process of this host that is gone (expiry: the claim's)
        host, _, rest = (held[0] or "").partition(":")
        pid = rest.partition(":")[0]
        return pid.isdigit() and process_gone(host, int(pid))

    def clear(self, held: tuple) -> None:  # the row deleted only while it is that holder's
        w = self.writer
        w.session.execute(w.dialect.release_lock(w.locks_table, self.model, held[0]))

    def holder(self) -> str:
        holder, until = self.held or (None, "?")
        return f"lock row of {LOCKS_TABLE} held by {holder}, until {until} unless renewed"

    def renew(self) -> None:
        if not self._claim():
            raise errors.transfer_running(
                self.model, self.writer.name, f"this transfer's lock expired and another transfer holds it "
                f"({self.held[0] if self.held else 'none'}); nothing of this window was committed",
                "run the transfer again once the other one ends")

    def release(self) -> None:
        self.clear((self.writer._holder,))


class BigqueryWriter(SqlWriter):
    DIALECT = sql.BigqueryDialect()

    def __init__(self, destination: BigqueryDestination, tuning: Tuning = DEFAULT) -> None:
        c = destination.connection
        super().__init__(destination, tuning, container=f"{c.project}.{c.dataset}",
                         what=f"BigQuery destination '{destination.name}' (project {c.project}, dataset {c.dataset})")
        self._holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.locks_table = self.dialect.qualified(self.container, LOCKS_TABLE)

    @property
    def client(self) -> bigquery.Client:
        if self._conn is None:
            with self._translated_errors():
                self._conn = bq.make_client(self.destination)
        return self._conn

    @property
    def session(self) -> BigquerySession:
        return BigquerySession(self.client)

    _translated_errors = bq.translated_errors

    def check(self) -> None:  # the dataset is the recipient's: nothing is created
        with self._translated_errors():
            self.client.get_dataset(self.container, retry=bigquery_retry())

    _create_container = check

    # -- the catalog: the tables API (the emulator has no INFORMATION_SCHEMA) -----------------------

    def _columns(self, name: str) -> dict[str, str]:
        from google.api_core.exceptions import NotFound

        try:
            table = self.client.get_table(f"{self.container}.{name}", retry=bigquery_retry())
        except NotFound as exc:
            if "Dataset" in str(exc):
                raise
            return {}
        return {f.name: f.field_type for f in table.schema}

    def _exists(self, name: str) -> bool:  # a table has a column at least
        return bool(self._columns(name))

    def _tables_starting_with(self, prefix: str) -> list[str]:
        tables = self.client.list_tables(self.container, retry=bigquery_retry())
        return [t.table_id for t in tables if t.table_id.startswith(prefix)]

    def _primary_key(self, name: str, model: ModelConfig) -> list[str]:
        """BigQuery keeps no key: a live table's is its status row's (recorded when first planned and
        by a refresh's publish); a table aside has its model's."""
        key = _key_text(model)
        if name == model.model_name:
            self.session.execute(self.dialect.record_primary_key(self.status_table, name, key))  # unless it has one
            key = (self.session.one(self.dialect.read_primary_key(self.status_table, name)) or (key,))[0]
        return json.loads(key)

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        with self._translated_errors():
            self.session.execute(self.dialect.locks_ddl(self.locks_table))
            self._locked.hold(model.model_name, LockRow(self, model.model_name), destination=self.name,
                              wait_seconds=self.tuning.lock_wait_seconds)

    # -- a window: one load job, one MERGE, one status MERGE ---------------------------------------

    def _create_staging(self, load: WindowLoad, *, in_memory: bool) -> StagingTable:
        staging = super()._create_staging(load, in_memory=in_memory)  # of text: its rows read typed
        staging.table = self.dialect.decoded(staging.table, load.model.columns)
        return staging

    def _stage_frame(self, rows: DataFrame | pa.Table, staging: StagingTable, load: WindowLoad) -> StagingTable:
        staging.volume = self._load(staging.name, load.model, load.model.columns, rows)
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
                write_csv([rows], pairs, path)
            else:
                stage_frame(rows.select(*[f"`{n.replace('`', '``')}`" for n, _ in pairs]), pairs, folder, path)
            size = os.path.getsize(path)
            if size == 0:
                return 0
            config = bigquery.LoadJobConfig(
                source_format=bigquery.SourceFormat.CSV, write_disposition=bigquery.WriteDisposition.WRITE_APPEND,
                schema=[bigquery.SchemaField(n, "STRING") for n, _ in pairs])
            with self._translated_errors(), open(path, "rb") as file:
                job = self.client.load_table_from_file(file, f"{self.container}.{name}", job_config=config)
                try:
                    job.result(retry=bigquery_retry())
                except BadRequest as exc:
                    raise errors.DataError(f"the load job into the staging table failed: {bq.first_line(exc)}",
                                           model=model.model_name if model else "(none)", destination=self.name,
                                           fix=TYPES_FIX) from None
        return size

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
        """The state recorded, then the refresh forgotten and its key recorded: killed before, the next
        transfer finds the refresh complete aside and publishes it again."""
        aside = self.refresh_table(model)
        self.session.execute(self.dialect.replace_table(self.table(model), aside))
        self._record_state(model, state, transfer_id)
        self.session.execute(self.dialect.update_status(self.status_table, model.model_name,
                                                        "refresh_state = NULL, primary_key = %s", (_key_text(model),)))
        self.session.execute(self.dialect.drop_table(aside))

    def delete_rows(self, frame: DataFrame, model: ModelConfig, transfer_id: str) -> int:
        chosen = [*model.primary_key, model.last_modified]
        name = self.staging_table_name(model, transfer_id)
        staging = StagingTable(name, self.dialect.qualified(self.container, name), model.model_name, self.table(model))
        self._create_staging_table(staging, model, chosen, logged=False)
        with self._translated_errors():
            try:
                if self._load(name, model, chosen, frame) == 0:
                    return 0
                return self.session.execute(self.dialect.delete_matching(
                    staging.target, self.dialect.decoded(staging.table, chosen), [c.destination_name for c in chosen]))
            finally:
                self.session.execute(self.dialect.drop_table(staging.table))

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
