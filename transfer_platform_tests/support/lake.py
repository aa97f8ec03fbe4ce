"""Parquet lakes and Delta tables of the events model: the lake's file, where a Delta destination's
tables are (a folder or a bucket), what a Delta table holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform_tests.support.config import (
    DESTINATION,
    events_model,
)
from transfer_platform_tests.support.events import MODEL, normalize


def lake_config(lake, delta_root, *, tenant: str, min_start: datetime) -> PlatformConfig:
    """The events model from a Parquet lake (folder ``events``) to one Delta destination
    (``delta_root``: its folder, or its connection: a bucket's, say)."""
    return parse_config({
        "sources": [{"name": "src", "vendor": "parquet", "connection": {"path": str(lake)}}],
        "models": [events_model("events", min_start=min_start)],
        "recipients": [{"name": "rcpt", "id_in_provider_system": tenant}],
        "destinations": [{"name": DESTINATION, "vendor": "delta", "recipient": "rcpt",
                          "connection": delta_root if isinstance(delta_root, dict) else {"path": str(delta_root)}}],
    }, now=datetime(2024, 6, 1, tzinfo=UTC))


@dataclass(frozen=True)
class DeltaTables:
    """Where a Delta destination's tables are: a folder, or a bucket with delta-rs's storage
    options (and a client to list what is left there)."""

    root: str
    options: dict[str, str] | None = None
    client: Any = None
    bucket: str | None = None

    def table(self, model: str = MODEL) -> DeltaTable:
        return DeltaTable(f"{self.root}/{model}", storage_options=self.options)

    def anything_at(self, relative: str) -> bool:
        """Whether any file is left at ``relative`` (a folder under the root)."""
        if self.client is None:
            return Path(self.root, relative).exists()
        prefix = self.root.removeprefix(f"s3://{self.bucket}/") + f"/{relative}/"
        return bool(self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix).get("KeyCount"))


SCHEMA = pa.schema([("id", pa.int64()), ("organization_id", pa.string()),
                    ("updated_at", pa.timestamp("us", tz="UTC")), ("payload", pa.string())])


def write_lake(lake: Path, rows: list) -> None:
    """Replace the lake's ``events`` folder by one Parquet file holding ``rows``."""
    folder = lake / "events"
    for old in folder.glob("*.parquet"):
        old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(
        [dict(zip(SCHEMA.names, r, strict=True)) for r in rows], schema=SCHEMA)
    pq.write_table(table, folder / f"part-{datetime.now(UTC).timestamp():.6f}.parquet")


def delivered(delta_root: DeltaTables | Path) -> list:
    tables = delta_root if isinstance(delta_root, DeltaTables) else DeltaTables(str(delta_root))
    table = tables.table().to_pyarrow_table()
    return normalize(tuple(r[c] for c in SCHEMA.names) for r in table.to_pylist())


def tenant_rows(rows: list, tenant: str) -> list:
    return normalize(r for r in rows if r[1] == tenant)
