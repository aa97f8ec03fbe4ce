"""A DuckDB database file (written with the duckdb package): the destination's configuration and
its record."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pydantic import ConfigDict, Field

from transfer_platform.config.entries import DestinationBase, Place, StrictModel, folder_place
from transfer_platform.vendors.record import Refusal, Vendor, one_query


class DuckdbConnection(StrictModel):
    path: Path  # the database file (one per recipient), created by the first transfer
    schema_: str | None = Field(default=None, alias="schema", min_length=1)  # default: main

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class DuckdbDestination(DestinationBase):
    """A DuckDB database file (one table per model in ``schema``), written with the duckdb package."""

    vendor: Literal["duckdb"]
    connection: DuckdbConnection

    def place(self) -> Place:
        return folder_place(self.connection.path, "DuckDB file")

    def problems(self, path: str) -> list:
        from transfer_platform.errors import Problem

        if self.connection.path.is_dir():
            return [Problem(f"{path}.connection.path", f"{self.connection.path} is a folder; a DuckDB "
                            "destination writes one database file",
                            "give the file's path, such as <folder>/<recipient>.duckdb")]
        return []


COLUMN_TYPES = MappingProxyType({  # as duckdb_columns() names them (compared as they are)
    "string": "VARCHAR",
    "integer": "BIGINT",
    "float": "DOUBLE",
    "boolean": "BOOLEAN",
    "timestamp": "TIMESTAMP WITH TIME ZONE",
    "date": "DATE",
    "decimal": "DECIMAL(38,9)",
    "json": "JSON",
})

DESTINATION = Vendor("duckdb", "destination", "transfer_platform.destinations.duckdb.writer", "DuckdbWriter",
                     DuckdbDestination, drivers=("duckdb", "pyarrow"), column_types=COLUMN_TYPES,
                     state_store="status row",
                     refuses=(one_query("destination", "one process writes a DuckDB file, one transaction per "
                                                       "window: there are no queries to run in parallel"),
                              Refusal("max_concurrent_transfers", 1,
                                      "DuckDB lets one process open its file for writing: a second transfer at "
                                      "once would wait for the first and then fail",
                                      "remove max_concurrent_transfers from this destination (transfers of it "
                                      "run one at a time)")))
