"""The configuration and the store do not import each other: the store validates its entries with
the file's parsing (``config/parsing.py``), and only the loader (``config/loading.py``) reads the
store, to add its entries to the file's."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "transfer_platform"


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports (anywhere in it, at the top or inside a function), and for
    ``from a import b`` also ``a.b``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def importers(folder: str, prefix: str) -> dict[str, list[str]]:
    """Module of ``folder`` -> what it imports under ``prefix`` (only modules that import any)."""
    found = {}
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        hits = sorted(n for n in imported(path) if n == prefix or n.startswith(prefix + "."))
        if hits:
            found[str(path.relative_to(PACKAGE))] = hits
    return found


def test_the_store_imports_the_parsing_of_the_configuration_never_its_loader() -> None:
    assert {m: n for m, n in importers("store", "transfer_platform.config.loading").items()} == {}


def test_only_the_loader_of_the_configuration_reads_the_store() -> None:
    assert list(importers("config", "transfer_platform.store")) == ["config/loading.py"]


def test_the_finder_sees_imports_inside_functions(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from transfer_platform.config.loading import load_config\n")
    assert "transfer_platform.config.loading" in imported(sample)
