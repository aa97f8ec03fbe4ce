"""Vendors as extras: ``pip install transfer-platform`` serves PostgreSQL, MySQL, DuckDB, Delta,
Parquet and S3; every other vendor's client comes with its extra (``pyproject.toml``'s
``[project.optional-dependencies]``, named by the vendor's record). A process that lacks the
extras' packages (a meta-path finder refuses them, as an install without them would) loads the
definitions and validates a PostgreSQL configuration, and refuses a Snowflake destination in one
line with the install command as its fix."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import transfer_platform
from transfer_platform import vendors
from transfer_platform.vendors.record import EXTRAS

ROOT = Path(transfer_platform.__file__).parent.parent
RECORDS = [*vendors.SOURCES.values(), *vendors.DESTINATIONS.values()]

#: what the extras install and the base install lacks (``uv export`` with and without
#: ``--all-extras``): their clients and the Google and Azure libraries under them
MISSING = ("snowflake", "google.cloud.bigquery", "google.cloud.storage", "google.api_core", "google.auth",
           "google.oauth2", "google.resumable_media", "clickhouse_connect", "azure", "paramiko", "pyiceberg")

#: run first in the subprocess: refuse every module of :data:`MISSING`, noting each refused name
WITHOUT_EXTRAS = f"""
import importlib.abc, sys
refused = []
class WithoutExtras(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == m or name.startswith(m + ".") for m in {MISSING!r}):
            refused.append(name)
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, WithoutExtras())
"""

POSTGRES_ONLY = """
sources:
  - name: shop_db
    vendor: postgres
    connection: {host: 127.0.0.1, port: 5432, database: test, username: postgres, password: "${SHOP_DB_PASSWORD}"}
models:
  - model_name: orders
    source_name: shop_db
    source_table: shop.orders
    organization_column: organization_id
    columns:
      - {name_in_source: id, data_type: integer, is_primary_key: true}
      - {name_in_source: organization_id, data_type: string}
      - {name_in_source: updated_at, data_type: timestamp, is_last_modified: true}
recipients:
  - {name: acme, id_in_provider_system: acme}
destinations:
  - name: acme_pg
    recipient: acme
    vendor: postgres
    connection: {host: 127.0.0.1, port: 5432, database: test, username: postgres, password: "${ACME_PG_PASSWORD}",
                 schema: acme_data}
"""

SNOWFLAKE = """
  - name: acme_sf
    recipient: acme
    vendor: snowflake
    connection: {account: acme, user: loader, password: "${ACME_SF_PASSWORD}", database: ANALYTICS,
                 schema: ACME, warehouse: LOADING}
"""

DELTA_IN_AZURE = """
  - name: acme_lake
    recipient: acme
    vendor: delta
    connection: {account_name: acmelake, container: tables, account_key: "${ACME_AZURE_KEY}"}
"""


def _without_extras(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``code`` run in a fresh interpreter that lacks the extras' packages."""
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS + textwrap.dedent(code)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300, check=False)


def _validate(config: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """``transfer-platform validate`` without the extras (the command line's main, in that process)."""
    return _without_extras(f"""
        from transfer_platform.cli import main
        code = main(["validate", "--config", {str(config)!r}])
        print("refused:", sorted(set(refused)))
        sys.exit(code)
        """, tmp_path)


def test_the_extras_are_pyprojects_optional_dependencies():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(declared) == {e.name for e in EXTRAS} | {"all"}
    for extra in EXTRAS:
        assert [re.split(r"[\[<>=]", r, maxsplit=1)[0] for r in declared[extra.name]] == [extra.package]
    assert declared["all"] == [f"transfer-platform[{','.join(e.name for e in EXTRAS)}]"]


def test_the_base_install_serves_postgres_mysql_duckdb_delta_parquet_and_s3():
    """Every other vendor names its extra, and each extra's client is among its drivers."""
    assert {v.name for v in RECORDS if v.extra is None} == {"postgres", "mysql", "duckdb", "delta", "parquet",
                                                            "s3", "local"}
    for vendor in (v for v in RECORDS if v.extra is not None):
        assert any(d == vendor.extra.module or d.startswith(vendor.extra.module + ".") for d in vendor.drivers)


def test_every_extra_is_installed_for_the_tests():
    """``scripts/dev setup`` installs them all (and an extra's module is spelt as it imports)."""
    assert [e.name for e in EXTRAS if not e.installed()] == []


def test_without_the_extras_the_definitions_load_and_validate_passes(tmp_path):
    config = tmp_path / "transfer_platform.yaml"
    config.write_text(POSTGRES_ONLY)
    loaded = _without_extras(f"""
        from transfer_platform.definitions import build_definitions
        defs = build_definitions({str(config)!r})
        print(sorted(spec.key.to_user_string() for spec in defs.resolve_all_asset_specs()))
        print("refused:", sorted(set(refused)))
        """, tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.splitlines()[-2:] == ["['acme/acme_pg/orders', 'source/shop_db/shop__orders']",
                                              "refused: []"]
    validated = _validate(config, tmp_path)
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.splitlines() == [f"{config}: valid (1 source(s), 1 model(s), 1 recipient(s), "
                                             "1 destination(s))", "refused: []"]


@pytest.mark.parametrize(("destination", "line"), [
    (SNOWFLAKE, "destinations[1] (acme_sf).vendor: vendor 'snowflake' needs snowflake-connector-python, which "
                "is not installed here; fix: pip install 'transfer-platform[snowflake]'"),
    (DELTA_IN_AZURE, "destinations[1] (acme_lake).vendor: vendor 'delta' needs azure-storage-blob, which is not "
                     "installed here; fix: pip install 'transfer-platform[azure]'"),
], ids=["snowflake", "delta-in-azure"])
def test_a_vendor_whose_client_is_missing_fails_validate_with_the_install_command(tmp_path, destination, line):
    config = tmp_path / "transfer_platform.yaml"
    config.write_text(POSTGRES_ONLY + destination)
    validated = _validate(config, tmp_path)
    assert validated.returncode == 2, validated.stdout + validated.stderr
    assert [e for e in validated.stderr.splitlines() if e.startswith("error:")] == [f"error: {config}: {line}"]
