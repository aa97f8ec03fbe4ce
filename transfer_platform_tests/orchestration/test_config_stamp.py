"""What makes a loaded configuration stale (``orchestration/scheduling/config_stamp.py``): a configuration
file without a store is not parsed for one (its YAML is the cost of a configuration of thousands
of destinations, which the process then parses once more to load it); a store spelled any way
YAML allows is still found."""

from __future__ import annotations

from pathlib import Path

import pytest

from transfer_platform.config import parsing
from transfer_platform.orchestration.scheduling import config_stamp

STORE = ('  connection: {host: 127.0.0.1, port: 5432, database: test, username: postgres, '
         'schema: tp_stamped}\n')


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files ``parsing.read_file`` parsed while the test ran."""
    seen: list[str] = []
    read_file = parsing.read_file

    def counted(path=None):
        seen.append(str(path))
        return read_file(path)

    monkeypatch.setattr(parsing, "read_file", counted)
    config_stamp._store_of.cache_clear()
    return seen


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(text)
    return str(path)


def test_a_file_without_a_store_is_not_parsed_for_one(tmp_path: Path, parsed: list[str]) -> None:
    path = write(tmp_path, "sources: []\nmodels: []\nrecipients: []\ndestinations: []\n")
    assert config_stamp._store_of(path, 1) is None
    assert parsed == []


@pytest.mark.parametrize("key", ["store", '"\\x73tore"', '"st\\u006Fre"'])
def test_a_store_is_found_however_its_key_is_spelled(tmp_path: Path, parsed: list[str], key: str) -> None:
    path = write(tmp_path, f"{key}:\n{STORE}sources: []\n")
    settings = config_stamp._store_of(path, 1)
    assert settings is not None
    assert settings.connection.schema_ == "tp_stamped"
    assert parsed == [path]


def test_may_name_a_store() -> None:
    assert not config_stamp.may_name_a_store("destinations:\n  - name: d0\n    vendor: postgres\n")
    assert config_stamp.may_name_a_store("store:\n")
    assert config_stamp.may_name_a_store('"\\x73tore": {}\n')  # an escape may spell it
