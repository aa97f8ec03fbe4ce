"""``test-connection`` of a BigQuery destination: the endpoint, the credentials and the dataset,
then what a transfer does in it, tried on probe tables dropped at once; a refused step names the
role (``roles/bigquery.dataEditor`` on the dataset, ``roles/bigquery.jobUser`` on the project)."""

from __future__ import annotations

import uuid
from contextlib import suppress
from typing import TYPE_CHECKING

import pyarrow as pa

from transfer_platform.destinations.bigquery.client import (
    CONNECT_FIX,
    DATASET_ROLE,
    PROJECT_ROLE,
    endpoint,
    first_line,
    missing_role,
    principal,
)
from transfer_platform.errors import ConfigError, ConnectionFailure, MissingPrivilege

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.bigquery.writer import BigqueryWriter
    from transfer_platform.probes import Check


def probe_destination(self: BigqueryWriter, models: list[ModelConfig], target: str) -> list[Check]:
    from google.api_core import exceptions as api

    from transfer_platform.config.models import ColumnConfig
    from transfer_platform.probes import Probe

    probe = Probe(target)
    c = self.destination.connection
    host, port = endpoint(self.destination)
    reach = f"reach dataset {c.project}.{c.dataset} with the configured credentials"
    name = "_tp_probe_" + uuid.uuid4().hex[:12]
    table = self.dialect.qualified(self.container, name)
    column = ColumnConfig.model_validate({"name_in_source": "id", "data_type": "string"})
    steps = [(f"create and drop tables ({DATASET_ROLE} on the dataset; queries need {PROJECT_ROLE})",
              lambda: self.session.execute(self.dialect.staging_ddl(table, table, None, [column], logged=False))),
             (f"load rows with a load job ({PROJECT_ROLE} on the project)",
              lambda: _load_one(self, name, column)),
             ("merge and delete rows (DML)",
              lambda: self.session.execute(self.dialect.delete_matching(table, "(SELECT 'probe' AS id)", ["id"])))]
    if not probe.reach(host, port):
        probe.skipped([reach, *(s for s, _ in steps)], "the endpoint cannot be reached")
        return probe.checks
    try:
        self.check()
    except (ConnectionFailure, ConfigError, MissingPrivilege) as exc:
        probe.failed(reach, getattr(exc, "reason", None) or str(exc).splitlines()[-1].strip(),
                     getattr(exc, "fix", None) or getattr(exc, "grant", None) or CONNECT_FIX)
        probe.skipped([s for s, _ in steps], "the dataset cannot be reached")
        return probe.checks
    probe.passed(reach)
    try:
        for index, (step, run) in enumerate(steps):
            try:
                run()
            except api.Forbidden as exc:
                refused = missing_role(self.destination, self.what, first_line(exc), principal(self._client))
                probe.failed(step, first_line(exc), refused.grant)
            except (api.GoogleAPIError, MissingPrivilege) as exc:
                probe.failed(step, first_line(exc), getattr(exc, "grant", "check the job's error in BigQuery"))
            else:
                probe.passed(step)
                continue
            probe.skipped([s for s, _ in steps[index + 1:]], "the step before failed")
            break
    finally:
        with suppress(Exception):  # reported by the step that failed
            self.session.execute(self.dialect.drop_table(table))
    return probe.checks


def _load_one(self: BigqueryWriter, name: str, column) -> None:
    import os
    import tempfile

    from transfer_platform.destinations.bigquery.load import write_csv

    with tempfile.TemporaryDirectory(prefix="tp_bigquery_") as folder:
        path = os.path.join(folder, "probe.csv")
        size = write_csv([pa.table({"id": ["probe"]})], [("id", "string")], path)
        self._load(path, size, name, None, [column])
