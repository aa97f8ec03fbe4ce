"""The Iceberg destination from the command line: ``test-connection`` (catalog reached, its
tables and the namespace creatable, the warehouse writable; a catalog down named), ``transfer
--dry-run`` (nothing created), a transfer, then ``integrity``."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from transfer_platform.cli import main
from transfer_platform_tests.support.events import create_events, insert_rows
from transfer_platform_tests.support.postgres import pg_connection_config

pytestmark = pytest.mark.integration
NOW = datetime.now(UTC)


def _config(tmp_path: Path, source_schema: str, catalog_schema: str, *, catalog_port: int | None = None,
            catalog_role: str | None = None) -> str:
    catalog = (pg_connection_config(catalog_schema) | ({"port": catalog_port} if catalog_port else {})
               | ({"username": catalog_role} if catalog_role else {}))
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [{"model_name": "events", "source_name": "src", "source_table": f"{source_schema}.events",
                    "organization_column": "organization_id", "max_transfer_time_window_seconds": "P1D",
                    "min_start_time_epoch": int((NOW - timedelta(days=3)).timestamp()),
                    "columns": [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                                {"name_in_source": "organization_id", "data_type": "string"},
                                {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
                                {"name_in_source": "payload", "data_type": "string"}]}],
        "recipients": [{"name": "acme", "id_in_provider_system": "a"}],
        "destinations": [{"name": "acme_lake", "recipient": "acme", "vendor": "iceberg",
                          "connection": {"catalog": catalog, "catalog_name": "cli",
                                         "warehouse": {"path": str(tmp_path / "warehouse")}}}],
        "spark": {"master": "local[2]", "driver_memory": "1g"},
    }))
    return str(path)


def test_test_connection_dry_run_transfer_and_integrity(tmp_path, spark, capsys, pg_conn, pg_schema, new_schema):
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, [(1, "a", NOW - timedelta(days=1), "x"), (2, "b", NOW - timedelta(days=1), "y"),
                                     (3, "a", NOW - timedelta(hours=2), "z")])
    catalog_schema = new_schema()
    config = _config(tmp_path, pg_schema, catalog_schema)

    assert main(["--config", config, "test-connection", "acme_lake"]) == 0
    out = capsys.readouterr().out
    assert "namespace 'acme'" in out
    assert "warehouse" in out
    assert "FAIL" not in out
    assert not (tmp_path / "warehouse").exists()  # the probe leaves nothing
    assert pg_conn.execute("SELECT to_regclass(%s)", (f'"{catalog_schema}".iceberg_tables',)).fetchone()[0] is None

    assert main(["--config", config, "transfer", "acme_lake", "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["status"], plan["rows"]) == ("PLANNED", 2)
    assert not (tmp_path / "warehouse").exists()
    assert pg_conn.execute("SELECT to_regclass(%s)", (f'"{catalog_schema}".iceberg_tables',)).fetchone()[0] is None

    assert main(["--config", config, "transfer", "acme_lake"]) == 0
    assert json.loads(capsys.readouterr().out)["models"][0]["rows_transferred"] == 2

    assert main(["--config", config, "integrity", "acme_lake"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "PASSED"
    assert report["models"][0]["rows_compared"] == 2


def test_test_connection_names_a_catalog_that_is_down(tmp_path, capsys, pg_schema, new_schema):
    from benchmarks.spark_server import free_port

    port = free_port()
    config = _config(tmp_path, pg_schema, new_schema(), catalog_port=port)

    assert main(["--config", config, "test-connection", "acme_lake"]) == 1
    out = capsys.readouterr().out
    assert f"127.0.0.1:{port}" in out
    assert "FAIL" in out


def test_a_catalog_role_without_usage_on_its_schema_gets_the_grant_from_a_transfer_as_from_test_connection(
        tmp_path, spark, capsys, pg_conn, pg_schema, new_schema):
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, [(1, "a", NOW - timedelta(days=1), "x")])
    catalog_schema, role = new_schema(), f"tp_role_{uuid.uuid4().hex[:8]}"
    pg_conn.execute(f'CREATE SCHEMA "{catalog_schema}"')  # the provider's, with no right for the role
    pg_conn.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE')
    try:
        config = _config(tmp_path, pg_schema, catalog_schema, catalog_role=role)
        grant = f'GRANT USAGE, CREATE ON SCHEMA "{catalog_schema}" TO "{role}"'

        assert main(["--config", config, "test-connection", "acme_lake"]) == 1
        (probed,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
        assert grant in probed

        assert main(["--config", config, "transfer", "acme_lake"]) == 1
        out, err = capsys.readouterr()
        assert json.loads(out)["models"][0]["status"] == "ERROR", out
        (line,) = [line for line in err.splitlines() if line.startswith("error:")]
        assert "unexpected" not in line, line
        assert "ProgrammingError" not in line, line
        assert f"no USAGE on schema '{catalog_schema}'" in line, line
        assert f"; fix: {grant}, and SELECT, INSERT, UPDATE, DELETE on" in line, line
        assert pg_conn.execute("SELECT to_regclass(%s)", (f'"{catalog_schema}".iceberg_tables',)).fetchone()[0] is None
    finally:
        pg_conn.execute(f'DROP SCHEMA IF EXISTS "{catalog_schema}" CASCADE')
        pg_conn.execute(f'DROP OWNED BY "{role}" CASCADE')
        pg_conn.execute(f'DROP ROLE "{role}"')
