"""Nothing a provider mistypes damages a recipient's table, in any destination.

- A model column the source does not have (``kindd`` for ``kind``), or whose source type cannot
  become the model's (a date read as an integer), is refused before the destination is touched:
  a ConfigError naming the model, the column, what the source has and the fix.
- A destination column the model no longer has (the source lost it, or a name was mistyped) is
  dropped only by a full refresh or with the model's ``allow_column_drop``; otherwise the transfer
  fails naming the column.

Each refusal leaves the destination exactly as it was: its columns, its rows and its watermark
(PostgreSQL: the table and its ``_transfer_status`` row; Delta: every file of the table, its
commits included; object storage: every object under the prefix).
"""

from __future__ import annotations

import hashlib
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform.destinations.delta import read_state
from transfer_platform.destinations.manifests import new_signing_key
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.destinations import WITHOUT_S3
from transfer_platform_tests.support.events import (
    MODEL,
    create_events,
    day,
    epoch,
    insert_rows,
    make_rows,
)
from transfer_platform_tests.support.postgres import pg_connection_config, status_row
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

TENANT = "acme"
MIN_START = day(2, 28)
NOW1 = day(3, 4) + timedelta(hours=12)
NOW2 = day(3, 5) + timedelta(hours=12)
TS = pa.timestamp("us", tz="UTC")
PRIVATE, _PUBLIC = new_signing_key()

ID = {"name_in_source": "id", "data_type": "integer", "is_primary_key": True}
ORG = {"name_in_source": "organization_id", "data_type": "string"}
UPDATED = {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True}
KIND = {"name_in_source": "kind", "data_type": "string"}
BASE = [ID, ORG, UPDATED]


@pytest.fixture(autouse=True)
def _signing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TP_TEST_SIGNING_KEY", PRIVATE)


# -- the source: a Parquet lake (or a PostgreSQL table) with a column "kind" ----------------------


def lake_rows(ids: range, when, *, kind: bool = True, born: bool = False) -> list[dict]:
    rows = []
    for i in ids:
        row = {"id": i, "organization_id": TENANT if i % 2 else "globex", "updated_at": when + timedelta(minutes=i)}
        if kind:
            row["kind"] = f"kind-{i % 3}"
        if born:
            row["born"] = date(2020, 1, 1) + timedelta(days=i)
        rows.append(row)
    return rows


def write_lake(lake: Path, rows: list[dict]) -> None:
    fields = [("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", TS)]
    fields += [(name, kind) for name, kind in (("kind", pa.string()), ("born", pa.date32())) if name in rows[0]]
    folder = lake / "events"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.parquet"):
        old.unlink()
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema(fields)), folder / "part-0.parquet")


def destination_block(vendor: str, where: str) -> dict:
    if vendor == "postgres":
        return {"vendor": "postgres", "connection": pg_connection_config(where)}
    if vendor == "delta":
        return {"vendor": "delta", "connection": {"path": where}}
    return {"vendor": "local", "connection": {"path": where, "prefix": "acme"},
            "signing_key": "${TP_TEST_SIGNING_KEY}"}


def make_config(source: dict, source_table: str, vendor: str, where: str, columns: list[dict],
                **model_settings: object) -> PlatformConfig:
    return parse_config({
        "sources": [{"name": "src", **source}],
        "models": [{"model_name": MODEL, "source_name": "src", "source_table": source_table,
                    "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
                    "min_start_time_epoch": epoch(MIN_START), "columns": columns, **model_settings}],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", **destination_block(vendor, where)}],
    })


def lake_config(lake: Path, vendor: str, where: str, columns: list[dict], **settings: object) -> PlatformConfig:
    return make_config({"vendor": "parquet", "connection": {"path": str(lake)}}, "events", vendor, where,
                       columns, **settings)


# -- the destination, as a recipient sees it ------------------------------------------------------


def files_under(root: Path, *, skip: tuple[str, ...]) -> dict[str, str]:
    """Every file under ``root`` (but those under the folders in ``skip``: the models' locks,
    which say who last held them) with its SHA-256."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not set(p.relative_to(root).parts) & set(skip)}


class Recipient:
    """What the recipient holds, per vendor: ``snapshot()`` to compare whole, ``columns()``,
    ``rows()`` and ``watermark()``."""

    def __init__(self, vendor: str, where: str, pg_conn) -> None:
        self.vendor, self.where, self.pg = vendor, where, pg_conn

    def columns(self) -> list[str]:
        if self.vendor == "postgres":
            return [r[0] for r in self.pg.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                "AND NOT attisdropped ORDER BY attnum", (f'"{self.where}"."{MODEL}"',)).fetchall()]
        if self.vendor == "delta":
            return pa.schema(DeltaTable(f"{self.where}/{MODEL}").schema().to_arrow()).names
        return pq.read_schema(self._newest_file()).names

    def rows(self) -> list[tuple]:
        if self.vendor == "postgres":
            return sorted(self.pg.execute(f'SELECT * FROM "{self.where}"."{MODEL}"').fetchall())
        if self.vendor == "delta":
            return sorted(tuple(r.values()) for r in DeltaTable(f"{self.where}/{MODEL}").to_pyarrow_table().to_pylist())
        return sorted(tuple(r.values()) for p in sorted(Path(self.where).rglob("part-*.parquet"))
                      for r in pq.read_table(p).to_pylist())

    def watermark(self):  # a datetime
        if self.vendor == "postgres":
            return status_row(self.pg, self.where)["watermark"]
        if self.vendor == "delta":
            return read_state(DeltaTable(f"{self.where}/{MODEL}")).watermark
        import json

        from transfer_platform.core.watermarks import ModelState

        book = json.loads((Path(self.where) / "acme" / "_transfer_platform" / MODEL / "state.json").read_text())
        return ModelState.from_json(book["state"]).watermark

    def snapshot(self) -> dict:
        if self.vendor == "postgres":
            tables = sorted(r[0] for r in self.pg.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (self.where,)).fetchall())
            return {"tables": tables, "columns": self.pg.execute(
                        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                        "%s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                        (f'"{self.where}"."{MODEL}"',)).fetchall(),
                    "rows": self.rows(), "status": status_row(self.pg, self.where)}
        return files_under(Path(self.where), skip=("_tp_locks", "_locks"))

    def _newest_file(self) -> Path:
        return max(Path(self.where).rglob("part-*.parquet"), key=lambda p: p.stat().st_mtime_ns)


def recipient_for(vendor: str, tmp_path: Path, dst_schema: str, pg_conn) -> Recipient:
    where = {"postgres": dst_schema, "delta": str(tmp_path / "delta"), "local": str(tmp_path / "bucket")}[vendor]
    return Recipient(vendor, where, pg_conn)


VENDORS = WITHOUT_S3


# -- a model column the source does not have ------------------------------------------------------


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_mistyped_source_column_changes_nothing(spark, tmp_path, dst_schema, pg_conn, vendor):
    lake = tmp_path / "lake"
    recipient = recipient_for(vendor, tmp_path, dst_schema, pg_conn)
    write_lake(lake, lake_rows(range(1, 21), day(3, 1)))
    good = lake_config(lake, vendor, recipient.where, [*BASE, KIND])
    assert transfer(spark, good, NOW1).status == "SUCCESS"
    before = recipient.snapshot()
    assert "kind" in recipient.columns()

    # new rows in the source: a transfer that went ahead would move rows and the watermark
    write_lake(lake, lake_rows(range(1, 31), day(3, 1)) + lake_rows(range(31, 41), day(3, 5)))
    mistyped = lake_config(lake, vendor, recipient.where, [*BASE, {**KIND, "name_in_source": "kindd"}])
    refused = transfer(spark, mistyped, NOW2, transfer_id="t2")

    assert refused.status == "ERROR"
    assert refused.error_type == "ConfigError", refused.error
    for words in (f"model '{MODEL}'", "kindd", "it returns: id, organization_id, updated_at, kind",
                  "name_in_source"):
        assert words in refused.error
    assert recipient.snapshot() == before
    assert recipient.watermark() == NOW1


def test_a_mistyped_postgres_source_column_changes_nothing(spark, pg_conn, pg_schema, dst_schema):
    """The same through the JDBC reader: the read is proven with a query that returns no row."""
    create_events(pg_conn, pg_schema)
    pg_conn.execute(f'ALTER TABLE "{pg_schema}".events ADD COLUMN kind text')
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "globex"], 10, [day(3, 1), day(3, 2)], seed=7))
    pg_conn.execute(f"UPDATE \"{pg_schema}\".events SET kind = 'k' || id")
    source = {"vendor": "postgres", "connection": pg_connection_config()}
    recipient = Recipient("postgres", dst_schema, pg_conn)
    columns = [*BASE, {"name_in_source": "payload", "data_type": "string"}, KIND]
    assert transfer(spark, make_config(source, f"{pg_schema}.events", "postgres", dst_schema, columns),
                    NOW1).status == "SUCCESS"
    before = recipient.snapshot()

    insert_rows(pg_conn, pg_schema, make_rows([TENANT], 5, [day(3, 5)], seed=8, start_id=100))
    mistyped = [*columns[:-1], {**KIND, "name_in_source": "kindd"}]
    refused = transfer(spark, make_config(source, f"{pg_schema}.events", "postgres", dst_schema, mistyped),
                       NOW2, transfer_id="t2")

    assert refused.error_type == "ConfigError", refused.error
    for words in (f"model '{MODEL}'", "kindd", "kind", "name_in_source"):
        assert words in refused.error
    assert recipient.snapshot() == before


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_source_type_the_model_cannot_read_changes_nothing(spark, tmp_path, dst_schema, pg_conn, vendor):
    """A column added to the model as an integer that the source holds as a date: Spark cannot
    cast it, which is known from the source's types alone, before the column is added."""
    lake = tmp_path / "lake"
    recipient = recipient_for(vendor, tmp_path, dst_schema, pg_conn)
    write_lake(lake, lake_rows(range(1, 21), day(3, 1), born=True))
    assert transfer(spark, lake_config(lake, vendor, recipient.where, [*BASE, KIND]), NOW1).status == "SUCCESS"
    before = recipient.snapshot()

    write_lake(lake, lake_rows(range(1, 41), day(3, 1), born=True))
    born = {"name_in_source": "born", "data_type": "integer"}
    refused = transfer(spark, lake_config(lake, vendor, recipient.where, [*BASE, KIND, born]), NOW2,
                       transfer_id="t2")

    assert refused.error_type == "ConfigError", refused.error
    for words in (f"model '{MODEL}'", "'born'", "date", "integer", "data_type"):
        assert words in refused.error
    assert recipient.snapshot() == before


# -- a destination column the model no longer has -------------------------------------------------


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("how", ["allow_column_drop", "full_refresh"])
def test_a_column_the_source_lost_is_dropped_only_when_allowed(spark, tmp_path, dst_schema, pg_conn,
                                                                vendor, how):
    lake = tmp_path / "lake"
    recipient = recipient_for(vendor, tmp_path, dst_schema, pg_conn)
    write_lake(lake, lake_rows(range(1, 21), day(3, 1)))
    assert transfer(spark, lake_config(lake, vendor, recipient.where, [*BASE, KIND]), NOW1).status == "SUCCESS"
    before = recipient.snapshot()

    # the source loses "kind" (and changes rows); the provider takes it out of the model
    write_lake(lake, lake_rows(range(1, 31), day(3, 1), kind=False) + lake_rows(range(31, 41), day(3, 5), kind=False))
    refused = transfer(spark, lake_config(lake, vendor, recipient.where, BASE), NOW2, transfer_id="t2")

    assert refused.status == "ERROR"
    assert refused.error_type == "SchemaMismatch", refused.error
    for words in (f"model '{MODEL}'", f"destination '{DESTINATION}'", "'kind'", "allow_column_drop: true",
                  "--full-refresh"):
        assert words in refused.error
    assert recipient.snapshot() == before

    if how == "allow_column_drop":
        done = transfer(spark, lake_config(lake, vendor, recipient.where, BASE, allow_column_drop=True), NOW2,
                        transfer_id="t3")
    else:
        done = transfer(spark, lake_config(lake, vendor, recipient.where, BASE), NOW2, transfer_id="t3",
                        full_refresh=True)
    assert done.status == "SUCCESS", done.error
    assert recipient.columns() == ["id", "organization_id", "updated_at"]
    assert recipient.watermark() == NOW2


def test_a_mistyped_destination_name_drops_nothing(spark, tmp_path, dst_schema, pg_conn):
    """``name_in_destination: kindd`` for a column delivered as ``kind``: the read works, but
    ``kind`` would be dropped (and ``kindd`` added); refused, nothing changed."""
    lake = tmp_path / "lake"
    recipient = Recipient("postgres", dst_schema, pg_conn)
    write_lake(lake, lake_rows(range(1, 21), day(3, 1)))
    assert transfer(spark, lake_config(lake, "postgres", dst_schema, [*BASE, KIND]), NOW1).status == "SUCCESS"
    before = recipient.snapshot()

    write_lake(lake, lake_rows(range(1, 41), day(3, 1)))
    renamed = [*BASE, {**KIND, "name_in_destination": "kindd"}]
    refused = transfer(spark, lake_config(lake, "postgres", dst_schema, renamed), NOW2, transfer_id="t2")

    assert refused.error_type == "SchemaMismatch", refused.error
    assert "'kind'" in refused.error
    assert recipient.snapshot() == before
