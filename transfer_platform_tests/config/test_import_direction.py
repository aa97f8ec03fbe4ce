"""Imports go one way. The configuration and the store do not import each other: the store validates
its entries with the file's parsing (``config/parsing.py``), and only the loader
(``config/loading.py``) reads the store, to add its entries to the file's. The API's modules import
one another without a loop: the routers stand on the HTTP edge (``api/edge.py``), and only the
application (``api/app.py``) imports the routers."""

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


def graph(folder: str) -> dict[str, set[str]]:
    """Module of ``folder`` (a flat package) -> the modules of ``folder`` it imports, anywhere in it."""
    package = "transfer_platform." + folder.replace("/", ".")
    modules = {f"{package}.{path.stem}": path for path in (PACKAGE / folder).glob("*.py") if path.stem != "__init__"}
    return {name: imported(path) & set(modules) - {name} for name, path in modules.items()}


def on_loops(edges: dict[str, set[str]]) -> list[str]:
    """The modules on an import loop of ``edges``: what is left once every module that imports
    nothing left, or that nothing left imports, has been taken away, again and again."""
    left = {name: set(targets) for name, targets in edges.items()}
    while True:
        imported_by_left = set().union(*left.values()) if left else set()
        off = [name for name, targets in left.items() if not targets & set(left) or name not in imported_by_left]
        if not off:
            return sorted(left)
        for name in off:
            del left[name]


def test_the_api_modules_import_one_another_without_a_loop() -> None:
    assert on_loops(graph("api")) == []


def test_only_the_application_imports_the_routers_and_none_imports_the_application() -> None:
    edges = graph("api")
    assert [name for name, targets in edges.items() if "transfer_platform.api.app" in targets] == []
    assert {"transfer_platform.api.links", "transfer_platform.api.transfers"} <= edges["transfer_platform.api.app"]


def test_the_loop_finder_finds_a_loop() -> None:
    assert on_loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c"]


def test_the_store_imports_the_parsing_of_the_configuration_never_its_loader() -> None:
    assert {m: n for m, n in importers("store", "transfer_platform.config.loading").items()} == {}


def test_only_the_loader_of_the_configuration_reads_the_store() -> None:
    assert list(importers("config", "transfer_platform.store")) == ["config/loading.py"]


def test_the_finder_sees_imports_inside_functions(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from transfer_platform.config.loading import load_config\n")
    assert "transfer_platform.config.loading" in imported(sample)
