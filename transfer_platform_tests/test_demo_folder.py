"""``transfer-platform demo --dir D`` empties D only when D is new, empty, or an earlier demo's
output (it holds the demo's marker file); any other folder, or a file, is refused untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from transfer_platform.cli import main
from transfer_platform.demo.run import MARKER, prepare_workdir
from transfer_platform.errors import ConfigError


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def someones_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    (folder / "thesis").mkdir(parents=True)
    (folder / "thesis" / "chapter1.tex").write_text("months of work")
    (folder / "notes.txt").write_text("keep me")
    return folder


def test_the_command_refuses_a_folder_it_did_not_make(someones_folder: Path, capsys) -> None:
    before = contents(someones_folder)

    assert main(["demo", "--dir", str(someones_folder)]) == 2

    assert contents(someones_folder) == before
    err = capsys.readouterr().err
    assert str(someones_folder) in err
    assert MARKER in err
    assert "--dir" in err


def test_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "report.pdf"
    target.write_bytes(b"%PDF")
    with pytest.raises(ConfigError, match="not a folder"):
        prepare_workdir(target)
    assert target.read_bytes() == b"%PDF"


@pytest.mark.parametrize("state", ["missing", "empty"])
def test_a_new_or_empty_folder_becomes_the_demos(tmp_path: Path, state: str) -> None:
    folder = tmp_path / "demo"
    if state == "empty":
        folder.mkdir()
    assert prepare_workdir(folder) == folder.resolve()
    assert sorted(p.name for p in folder.iterdir()) == [MARKER]


def test_an_earlier_demos_folder_is_emptied(tmp_path: Path) -> None:
    folder = prepare_workdir(tmp_path / "demo")
    (folder / "lake").mkdir()
    (folder / "lake" / "part-0.parquet").write_bytes(b"old")
    (folder / "transfer_platform.yaml").write_text("old")

    assert prepare_workdir(folder) == folder
    assert sorted(p.name for p in folder.iterdir()) == [MARKER]


def test_a_marker_that_is_not_a_file_does_not_count(someones_folder: Path) -> None:
    (someones_folder / MARKER).mkdir()
    with pytest.raises(ConfigError):
        prepare_workdir(someones_folder)
    assert (someones_folder / "notes.txt").read_text() == "keep me"
