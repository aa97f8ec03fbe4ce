"""A small, fast platform for orchestration tests: a Parquet lake and Delta destinations on disk,
written as a real configuration file, and a Dagster home whose ``dagster.yaml`` is the shipped one.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml
from deltalake import DeltaTable

REPO = Path(__file__).resolve().parents[2]
TS = pa.timestamp("us", tz="UTC")
TENANTS = {"acme": "org-acme", "globex": "org-glob'ex"}


def write_lake(root: Path, *, days: int = 3, per_day: int = 4, now: datetime | None = None) -> None:
    """Tables ``items`` and ``notes`` with rows of every tenant over the last ``days`` days."""
    now = now or datetime.now(UTC)
    start = (now - timedelta(days=days)).replace(hour=0, minute=0, second=0, microsecond=0)
    for table in ("items", "notes"):
        rows, key = [], 0
        for day in range(days):
            for i in range(per_day):
                for tenant in TENANTS.values():
                    key += 1
                    rows.append({"id": key, "organization_id": tenant,
                                 "updated_at": start + timedelta(days=day, hours=5 * i, microseconds=key),
                                 "v": f"{table}-{key}"})
        folder = root / table
        folder.mkdir(parents=True, exist_ok=True)
        schema = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", TS),
                            ("v", pa.string())])
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / "part-0.parquet")


def model(name: str, *, window: int | None = 86_400, days: int = 3) -> dict:
    start = datetime.now(UTC) - timedelta(days=days)
    entry = {
        "model_name": name, "source_name": "lake", "source_table": name,
        "organization_column": "organization_id",
        "min_start_time_epoch": int(start.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()),
        "columns": [
            {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
            {"name_in_source": "organization_id", "data_type": "string"},
            {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
            {"name_in_source": "v", "data_type": "string"},
        ],
    }
    if window:
        entry["max_transfer_time_window_seconds"] = window
    return entry


def write_config(root: Path, *, destinations: dict[str, dict] | None = None, source_limit: int = 10,
                 window: int | None = 86_400) -> Path:
    """``transfer_platform.yaml`` under ``root`` (lake at ``root/lake``, Delta at ``root/dest_<name>``).

    ``destinations``: recipient name -> extra destination fields (``max_concurrent_transfers``,
    ``frequency_minutes``, ``is_enabled``, ``enabled_models``); the destination is ``<recipient>_delta``.
    """
    destinations = destinations if destinations is not None else {"acme": {}}
    write_lake(root / "lake")
    config = {
        "sources": [{"name": "lake", "vendor": "parquet", "connection": {"path": "lake"},
                     "lookback_window": 0, "max_concurrent_transfers": source_limit}],
        "models": [model("items", window=window), model("notes", window=window)],
        "recipients": [{"name": r, "id_in_provider_system": TENANTS[r]} for r in destinations],
        "destinations": [{"name": f"{r}_delta", "recipient": r, "vendor": "delta",
                          "connection": {"path": f"dest_{r}"}, **extra}
                         for r, extra in destinations.items()],
        "spark": {"master": "local[1]", "driver_memory": "512m"},
    }
    path = root / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def dagster_home(root: Path) -> Path:
    """A Dagster home with the repository's ``dagster.yaml`` (the tagging run coordinator)."""
    home = root / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    return home


def lake_rows(root: Path, table: str, recipient: str = "acme") -> list[dict]:
    """The recipient's rows of the lake's ``table`` (every file of it), the latest version of each
    key (an update may have been appended), by id."""
    rows = pa.concat_tables(pq.read_table(f) for f in sorted((root / "lake" / table).glob("*.parquet")))
    rows = rows.filter(pc.equal(rows["organization_id"], TENANTS[recipient])).to_pylist()
    latest: dict[int, dict] = {}
    for row in rows:
        if row["id"] not in latest or row["updated_at"] > latest[row["id"]]["updated_at"]:
            latest[row["id"]] = row
    return sorted(latest.values(), key=lambda r: r["id"])


def delivered(root: Path, recipient: str, table: str) -> list[dict]:
    """The rows of ``table`` in the recipient's Delta destination (``root/dest_<recipient>``), by id;
    none before its first commit."""
    path = root / f"dest_{recipient}" / table
    if not (path / "_delta_log").exists():
        return []
    rows = DeltaTable(str(path)).to_pyarrow_table().select(["id", "organization_id", "updated_at", "v"])
    return sorted(rows.to_pylist(), key=lambda r: r["id"])
