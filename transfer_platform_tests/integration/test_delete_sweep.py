"""The hard-delete sweep (``delete_detection: sweep``): destination rows whose key is gone from the
tenant's source rows are removed; a row that may still be arriving (last-modified at or after the
watermark minus the lookback) is not; another tenant's deletes change nothing; a source that
fails deletes nothing, one whose rows are all gone empties the destination. PostgreSQL and Delta destinations.

The expectation is the source's: after the sweep the destination holds the tenant's source rows,
plus the deleted rows last modified inside the lookback before the watermark (the last transfer's
clock), which the seeds' rule says may still be arriving.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from transfer_platform.config.parsing import parse_config
from transfer_platform.errors import ConfigError, ConnectionFailure
from transfer_platform.transfers.delete_sweep import sweep_deletes
from transfer_platform_tests.support.config import events_model
from transfer_platform_tests.support.destinations import ONE_ROW_PER_KEY
from transfer_platform_tests.support.events import (
    create_events,
    day,
    insert_rows,
    make_rows,
    source_rows,
)
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

TENANT, OTHER = "acme", "globex"
NOW = day(3, 4)


def config_for(pg_schema: str, vendor: str, dst_schema: str, delta_root, *, source_port: int | None = None):
    source = pg_connection_config()
    if source_port:
        source["port"] = source_port
    model = {**events_model(f"{pg_schema}.events", min_start=day(2, 28)), "delete_detection": "sweep"}
    connection = pg_connection_config(dst_schema) if vendor == "postgres" else {"path": str(delta_root)}
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": source}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": "dst", "vendor": vendor, "recipient": "rcpt", "connection": connection}],
    }, now=day(6, 1))


def delivered(pg_conn, vendor: str, dst_schema: str, delta_root) -> list:
    if vendor == "postgres":
        return sorted(r[0] for r in pg_conn.execute(f'SELECT id FROM "{dst_schema}".events').fetchall())
    from deltalake import DeltaTable

    return sorted(DeltaTable(str(delta_root / "events")).to_pyarrow_table(columns=["id"]).column("id").to_pylist())


@pytest.mark.parametrize("vendor", ONE_ROW_PER_KEY)
def test_rows_gone_from_the_source_are_removed_but_not_those_still_arriving(
        spark, pg_conn, pg_schema, dst_schema, tmp_path, vendor):
    create_events(pg_conn, pg_schema)
    rows = make_rows([TENANT, OTHER], 10, [day(3, 1), day(3, 2)], seed=31)
    newest = 999  # committed 10 s before the transfer's clock: inside the lookback of the watermark
    rows.append((newest, TENANT, NOW - timedelta(seconds=10), "may still be arriving"))
    insert_rows(pg_conn, pg_schema, rows)
    acme = [r[0] for r in rows if r[1] == TENANT]
    config = config_for(pg_schema, vendor, dst_schema, tmp_path / "delta")
    assert transfer(spark, config, NOW, "t1").status == "SUCCESS"
    assert delivered(pg_conn, vendor, dst_schema, tmp_path / "delta") == sorted(acme)

    latest_other = max((r for r in rows if r[1] == TENANT and r[0] != newest), key=lambda r: r[2])[0]
    gone = [k for k in acme if k not in (newest, latest_other)][:2] + [latest_other]  # a sparse tenant's last
    pg_conn.execute(f'DELETE FROM "{pg_schema}".events WHERE id = ANY(%s)', (gone + [newest],))
    pg_conn.execute(f'DELETE FROM "{pg_schema}".events WHERE organization_id = %s', (OTHER,))
    report = sweep_deletes(spark, config, "dst", config.model("events"), NOW + timedelta(hours=1), "s1")

    assert report.rows_compared == len(acme)
    assert report.rows_deleted == 3
    expected = sorted([r[0] for r in source_rows(pg_conn, pg_schema, TENANT)] + [newest])
    assert delivered(pg_conn, vendor, dst_schema, tmp_path / "delta") == expected
    again = sweep_deletes(spark, config, "dst", config.model("events"), NOW + timedelta(hours=2), "s2")
    assert again.rows_deleted == 0  # idempotent
    assert transfer(spark, config, NOW + timedelta(hours=3), "t2").status == "SUCCESS"  # state intact


@pytest.mark.parametrize("vendor", ONE_ROW_PER_KEY)
def test_a_source_that_fails_deletes_nothing_and_an_emptied_tenant_is_emptied(
        spark, pg_conn, pg_schema, dst_schema, tmp_path, vendor):
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT], 6, [day(3, 1)], seed=32))
    config = config_for(pg_schema, vendor, dst_schema, tmp_path / "delta")
    assert transfer(spark, config, NOW, "t1").status == "SUCCESS"
    before = delivered(pg_conn, vendor, dst_schema, tmp_path / "delta")

    pg_conn.execute(f'DELETE FROM "{pg_schema}".events')  # every row of the tenant is gone
    unreachable = config_for(pg_schema, vendor, dst_schema, tmp_path / "delta", source_port=5999)
    with pytest.raises(ConnectionFailure, match="5999"):  # a failed read is not an empty one
        sweep_deletes(spark, unreachable, "dst", unreachable.model("events"), NOW, "s1")
    assert delivered(pg_conn, vendor, dst_schema, tmp_path / "delta") == before
    report = sweep_deletes(spark, config, "dst", config.model("events"), NOW, "s2")
    assert report.rows_deleted == len(before)
    assert delivered(pg_conn, vendor, dst_schema, tmp_path / "delta") == []


def test_a_sweep_frequency_without_a_sweep_is_refused():
    model = {**events_model("events", min_start=day(2, 28)), "delete_sweep_frequency_minutes": 60}
    with pytest.raises(ConfigError, match="delete_sweep_frequency_minutes: is set but delete_detection is none"):
        parse_config({
            "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
            "models": [model],
            "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
            "destinations": [{"name": "dst", "vendor": "postgres", "recipient": "rcpt",
                              "connection": pg_connection_config("x")}],
        }, now=day(6, 1))


def test_the_command_line_sweeps_and_reports(spark, pg_conn, pg_schema, dst_schema, tmp_path, capsys):
    import json

    import yaml

    from transfer_platform.cli import main

    create_events(pg_conn, pg_schema)
    rows = make_rows([TENANT], 6, [day(3, 1)], seed=33)
    insert_rows(pg_conn, pg_schema, rows)
    config = config_for(pg_schema, "postgres", dst_schema, None)
    assert transfer(spark, config, NOW, "t1").status == "SUCCESS"
    oldest = min(rows, key=lambda r: r[2])[0]
    pg_conn.execute(f'DELETE FROM "{pg_schema}".events WHERE id = %s', (oldest,))
    path = tmp_path / "tp.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json", by_alias=True, exclude_defaults=True)))
    assert main(["--config", str(path), "sweep-deletes", "dst"]) == 0
    (report,) = json.loads(capsys.readouterr().out)["models"]
    assert (report["model"], report["rows_compared"], report["rows_deleted"]) == ("events", 6, 1)
    assert main(["--config", str(path), "sweep-deletes", "dst", "--model", "nope"]) == 2
