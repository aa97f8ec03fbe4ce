"""A sample multi-tenant Parquet "lake" (the way an Athena/S3 source looks) and its configuration."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

#: tenant ids as the provider stores them: one has a quote in it, on purpose
TENANTS = {"acme": "org-acme", "globex": "org-globex", "oreilly": "org-o'reilly"}
DAYS = 90
#: the variable holding the private key the demo's object-storage destination signs manifests with
SIGNING_KEY_VARIABLE = "TRANSFER_PLATFORM_DEMO_SIGNING_KEY"

TABLES: dict[str, dict] = {
    "accounts": {"rows_per_tenant": 1_500, "window": None},  # no window: one per transfer
    "events": {"rows_per_tenant": 6_000, "window": 86_400},  # daily windows
    "invoices": {"rows_per_tenant": 2_500, "window": "P7D"},  # weekly windows
}

_TS = pa.timestamp("us", tz="UTC")


def _schema(table: str) -> pa.Schema:
    common = [("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", _TS)]
    extra = {
        "accounts": [("name", pa.string()), ("plan", pa.string()), ("seats", pa.int64())],
        "events": [("kind", pa.string()), ("payload", pa.string()), ("value", pa.float64())],
        "invoices": [("amount", pa.float64()), ("currency", pa.string()), ("paid", pa.bool_())],
    }[table]
    return pa.schema(common + extra)


def _row(table: str, rng: random.Random, key: int, tenant_id: str, updated_at: datetime) -> dict:
    row = {"id": key, "organization_id": tenant_id, "updated_at": updated_at}
    if table == "accounts":
        row |= {"name": f"account {key}", "plan": rng.choice(["free", "team", "enterprise"]),
                "seats": rng.randint(1, 500)}
    elif table == "events":
        row |= {"kind": rng.choice(["click", "view", "signup"]),
                "payload": json.dumps({"path": f"/p/{rng.randint(1, 999)}", "ok": True}),
                "value": round(rng.random() * 100, 3)}
    else:
        row |= {"amount": round(rng.random() * 5000, 2), "currency": rng.choice(["USD", "EUR"]),
                "paid": rng.random() < 0.7}
    return row


def generate_lake(root: Path, now: datetime, seed: int = 7, days: int = DAYS, scale: float = 1.0) -> dict[str, int]:
    """Write every table under ``root/<table>/`` and return row counts per table."""
    rng = random.Random(seed)
    start = now - timedelta(days=days)
    counts = {}
    for table, spec in TABLES.items():
        rows, key = [], 0
        for tenant_id in TENANTS.values():
            for _ in range(max(1, int(spec["rows_per_tenant"] * scale))):
                key += 1
                offset = rng.random() * (now - start - timedelta(minutes=10)).total_seconds()
                rows.append(_row(table, rng, key, tenant_id, start + timedelta(seconds=offset)))
        write_table(root, table, rows)
        counts[table] = len(rows)
    return counts


def read_table(root: Path, table: str) -> list[dict]:
    return pq.read_table(root / table).to_pylist()


def write_table(root: Path, table: str, rows: list[dict]) -> None:
    folder = root / table
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.parquet"):
        old.unlink()
    rows = sorted(rows, key=lambda r: r["updated_at"])
    pq.write_table(pa.Table.from_pylist(rows, schema=_schema(table)), folder / "part-0.parquet",
                   row_group_size=5_000)


def change_lake(root: Path, now: datetime, seed: int = 11) -> dict[str, dict[str, int]]:
    """Update some rows and add new ones, with last-modified values just before ``now``."""
    rng = random.Random(seed)
    changes = {}
    for table in TABLES:
        rows = read_table(root, table)
        next_key = max(r["id"] for r in rows) + 1
        updated = rng.sample(range(len(rows)), k=len(rows) // 50)
        for index in updated:
            row = rows[index]
            stamp = now - timedelta(seconds=rng.randint(1, 120), microseconds=rng.randint(0, 999_999))
            rows[index] = _row(table, rng, row["id"], row["organization_id"], stamp)
        added = 0
        for tenant_id in TENANTS.values():
            for _ in range(rng.randint(20, 60)):
                stamp = now - timedelta(seconds=rng.randint(1, 120), microseconds=rng.randint(0, 999_999))
                rows.append(_row(table, rng, next_key, tenant_id, stamp))
                next_key += 1
                added += 1
        write_table(root, table, rows)
        changes[table] = {"updated": len(updated), "added": added}
    return changes


def columns_for(table: str) -> list[dict]:
    columns = []
    for field in _schema(table):
        data_type = {"int64": "integer", "string": "string", "double": "float", "bool": "boolean"}.get(
            str(field.type), "timestamp")
        column = {"name_in_source": field.name, "data_type": data_type}
        if field.name == "id":
            column["is_primary_key"] = True
        if field.name == "updated_at":
            column["is_last_modified"] = True
        columns.append(column)
    return columns


def write_config(path: Path, *, lake: str, destinations: str, min_start_epoch: int) -> None:
    config = {
        "sources": [{"name": "lake", "vendor": "parquet", "connection": {"path": lake}}],
        "models": [
            {
                "model_name": table,
                "source_name": "lake",
                "source_table": table,
                "organization_column": "organization_id",
                **({"max_transfer_time_window_seconds": spec["window"]} if spec["window"] else {}),
                "min_start_time_epoch": min_start_epoch,
                "columns": columns_for(table),
            }
            for table, spec in TABLES.items()
        ],
        "recipients": [{"name": name, "id_in_provider_system": tenant_id}
                       for name, tenant_id in TENANTS.items()],
        "destinations": [
            {"name": f"{name}_delta", "recipient": name, "vendor": "delta",
             "connection": {"path": f"{destinations}/{name}"}, "frequency_minutes": 60}
            for name in TENANTS
        ] + [  # acme also takes two models as Parquet files with signed manifests
            {"name": "acme_files", "recipient": "acme", "vendor": "local",
             "connection": {"path": f"{destinations}/acme_files", "prefix": "provider"},
             "signing_key": "${" + SIGNING_KEY_VARIABLE + "}", "enabled_models": ["accounts", "invoices"],
             "frequency_minutes": 60},
            # globex also takes every model into a DuckDB file (no server either)
            {"name": "globex_duckdb", "recipient": "globex", "vendor": "duckdb",
             "connection": {"path": f"{destinations}/globex.duckdb"}, "frequency_minutes": 60},
        ],
        "spark": {"master": "local[2]", "driver_memory": "1g"},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
