"""Google BigQuery (written with google-cloud-bigquery): the destination's configuration and its
record."""

from __future__ import annotations

from types import MappingProxyType
from typing import Literal

from pydantic import Field

from transfer_platform.config.entries import DestinationBase, Place, StrictModel
from transfer_platform.config.secrets import EnvRef
from transfer_platform.vendors.record import BIGQUERY, Vendor, one_query


class BigqueryConnection(StrictModel):
    """One BigQuery dataset (the recipient's, created beforehand) in one project."""

    project: str = Field(pattern=r"^[a-z0-9.:-]{1,100}$")  # the project id (lower case, digits, hyphens; domain:name)
    dataset: str = Field(pattern=r"^[A-Za-z0-9_]{1,1024}$")
    location: str | None = Field(default=None, min_length=1)  # the dataset's (US, EU, europe-west1); None: BigQuery's
    # a service-account key (its JSON) in an environment variable ("${VAR}"); without it: Application
    # Default Credentials, or, against api_endpoint (an emulator), anonymous credentials
    credentials: EnvRef | None = None
    api_endpoint: str | None = Field(default=None, pattern=r"^https?://")  # an emulator's address


class BigqueryDestination(DestinationBase):
    """A BigQuery dataset: one table per model beside ``_transfer_status`` and ``_transfer_locks``."""

    vendor: Literal["bigquery"]
    connection: BigqueryConnection

    def place(self) -> Place:
        c = self.connection
        endpoint = (c.api_endpoint or "bigquery.googleapis.com").rstrip("/").lower()
        return Place("bigquery", (endpoint, c.project), (c.dataset,),
                     f"BigQuery project {c.project}, dataset {c.dataset}")


COLUMN_TYPES = MappingProxyType({  # as the tables API names them back: legacy names matched too (the dialect)
    "string": "STRING",
    "integer": "INT64",
    "float": "FLOAT64",
    "boolean": "BOOL",
    "timestamp": "TIMESTAMP",
    "date": "DATE",
    "decimal": "NUMERIC",
    "json": "JSON",
})

DESTINATION = Vendor("bigquery", "destination", "transfer_platform.destinations.bigquery.writer", "BigqueryWriter",
                     BigqueryDestination, drivers=("google.cloud.bigquery", "pyarrow", "pyarrow.csv"),
                     state_store="status row", column_types=COLUMN_TYPES, extra=BIGQUERY,
                     refuses=(one_query("destination", "a window is one load job and one MERGE: BigQuery "
                                                       "parallelizes each by itself"),))
