"""A ``duckdb`` destination's configuration: a database file (relative to the configuration file's
folder), its schema, and what ``validate`` refuses (a folder as the file, settings without effect,
two destinations sharing a file or a DuckDB file inside another destination's folder)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.config.parsing import parse_config
from transfer_platform.errors import ConfigError


def raw(*destinations: dict) -> dict:
    return {"sources": [{"name": "lake", "vendor": "parquet", "connection": {"path": "lake"}}], "models": [],
            "recipients": [{"name": "acme", "id_in_provider_system": "a"}],
            "destinations": [{"recipient": "acme", **d} for d in destinations]}


def duckdb(name: str, path: str, **settings) -> dict:
    return {"name": name, "vendor": "duckdb", "connection": {"path": path}, **settings}


def test_the_file_is_relative_to_the_configuration_and_the_schema_defaults_to_main(tmp_path: Path) -> None:
    file = tmp_path / "transfer_platform.yaml"
    file.write_text(yaml.safe_dump(raw(duckdb("acme_duckdb", "warehouse/acme.duckdb"),
                                       {**duckdb("other", "b.duckdb"), "connection": {"path": "b.duckdb",
                                                                                      "schema": "analytics"}})))
    config = load_config(file)
    first, second = config.destinations
    assert first.connection.path == tmp_path / "warehouse" / "acme.duckdb"
    assert first.connection.schema_ is None  # the writer's default: main
    assert second.connection.schema_ == "analytics"


@pytest.mark.parametrize(("entries", "problem"), [
    ((duckdb("d", "{tmp}"),), "is a folder; a DuckDB destination writes one database file"),
    ((duckdb("d", "{tmp}/a.duckdb", max_concurrent_transfers=2),), "max_concurrent_transfers: has no effect"),
    ((duckdb("d", "{tmp}/a.duckdb", max_concurrent_queries_per_transfer=2),), "max_concurrent_queries_per_transfer"),
    ((duckdb("d", "{tmp}/a.duckdb"), duckdb("e", "{tmp}/a.duckdb")), "destinations d, e write to the same place"),
    ((duckdb("d", "{tmp}/lake/a.duckdb"), {"name": "e", "vendor": "delta", "connection": {"path": "{tmp}/lake"}}),
     "one inside the other"),
], ids=["a-folder", "concurrent-transfers", "parallel-queries", "one-file-twice", "inside-a-delta-folder"])
def test_validate_refuses(tmp_path: Path, entries: tuple, problem: str) -> None:
    text = yaml.safe_dump(raw(*entries)).replace("{tmp}", str(tmp_path))
    with pytest.raises(ConfigError, match=problem):
        parse_config(yaml.safe_load(text))


def test_two_recipients_files_in_one_folder_are_accepted(tmp_path: Path) -> None:
    config = parse_config(raw(duckdb("d", f"{tmp_path}/acme.duckdb"), duckdb("e", f"{tmp_path}/globex.duckdb")))
    assert [d.vendor for d in config.destinations] == ["duckdb", "duckdb"]
