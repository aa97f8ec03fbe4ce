"""The house's layout holds (the issue "a house for many vendors"), read from the code's syntax
trees, not its text:

- no test module imports another: what tests share is in ``transfer_platform_tests/support/``
  (conftest.py files are test code too: they may import support, nothing else of the tests);
- the benchmarks import no test code (``benchmarks/`` stands on its own and on the product);
- Dagster's private names are reached only through ``transfer_platform/orchestration/
  dagster_internals.py``: no other module of the product imports a ``dagster._...`` module (or a
  ``_name`` from ``dagster``), nor names one in a string other than a docstring.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS, SUPPORT = "transfer_platform_tests", "transfer_platform_tests.support"
DOOR = Path("transfer_platform/orchestration/dagster_internals.py")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of each module or name ``path`` imports, relative imports resolved:
    ``from a.b import c`` gives ``a.b.c``."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package[:len(package) - node.level + 1]
                base = ".".join([*above, *([base] if base else [])])
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}" if alias.name != "*" else base


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the module's, classes' and functions' docstring nodes."""
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, owners) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str)}


def _private_dagster(name: str) -> bool:
    """``dagster._x...`` (a private module of Dagster, or a private name imported from it)."""
    parts = name.split(".")
    return parts[0] == "dagster" and len(parts) > 1 and parts[1].startswith("_") and not parts[1].endswith("__")


def _file_violations(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, what) of each break of the rules in ``path`` (a file of the tree at ``root``)."""
    top, found = path.relative_to(root).parts[0], []
    for line, name in _imports(path, root):
        if top == TESTS and _within(name, TESTS) and not _within(name, SUPPORT) and name != TESTS:
            found.append((line, f"imports {name} (test code outside {SUPPORT}: move what is shared "
                                "into support/)"))
        elif top == "benchmarks" and _within(name, TESTS):
            found.append((line, f"imports {name} (the benchmarks import no test code)"))
        elif top == "transfer_platform" and _private_dagster(name):
            found.append((line, f"imports {name} (Dagster's private names go through {DOOR})"))
    if top == "transfer_platform":
        tree = ast.parse(path.read_bytes(), filename=str(path))
        docstrings = _docstrings(tree)
        found += [(node.lineno, f"names {node.value!r} (Dagster's private names go through {DOOR})")
                  for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value.startswith("dagster._") and id(node) not in docstrings]
    return sorted(found)


def layout_violations(root: Path = ROOT) -> list[str]:
    """``<file>:<line>: <what>`` for each break of the layout's rules in the tree at ``root``."""
    paths = [p for top in (TESTS, "benchmarks", "transfer_platform") for p in sorted((root / top).rglob("*.py"))
             if p.relative_to(root) != DOOR]
    return [f"{path.relative_to(root)}:{line}: {what}" for path in paths
            for line, what in _file_violations(path, root)]


def test_the_layout_holds():
    violations = layout_violations()
    assert violations == [], "\n".join(violations)


def test_the_checker_finds_each_kind_of_violation(tmp_path):
    files = {
        "transfer_platform_tests/__init__.py": "",
        "transfer_platform_tests/support/__init__.py": "",
        "transfer_platform_tests/support/config.py": "import transfer_platform_tests.support.events\n",
        "transfer_platform_tests/conftest.py": (
            "from transfer_platform_tests.support.api import api\n"
            "from transfer_platform_tests.api.test_x import fixture\n"),
        "transfer_platform_tests/api/__init__.py": "",
        "transfer_platform_tests/api/test_y.py": (
            '"""from transfer_platform_tests.api.test_x import fixture: a docstring"""\n'
            "from transfer_platform_tests.support import api\n"
            "from . import test_x\n"
            "from ..config import test_config\n"
            "import transfer_platform_tests.config.test_config as c\n"),
        "benchmarks/__init__.py": "",
        "benchmarks/common.py": "import transfer_platform\nfrom transfer_platform_tests.support import postgres\n",
        "transfer_platform/__init__.py": "",
        "transfer_platform/orchestration/__init__.py": "",
        "transfer_platform/orchestration/dagster_internals.py": (
            "import dagster._cli.api\nWARM = ('dagster._core.execution.api',)\n"),
        "transfer_platform/orchestration/worker.py": (
            '"""Reaches dagster._cli.api through the door: a docstring."""\n'
            "import dagster\n"
            "from dagster import DagsterInstance\n"
            "# dagster._utils in a comment\n"
            "from dagster._core.events import DagsterEvent\n"
            "from dagster import _check\n"
            "WARM = ('pyarrow', 'dagster._cli.api')\n"
            "def f():\n"
            '    """dagster._x: a docstring"""\n'
            "    import dagster._utils\n"),
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = [v.split(" (")[0] for v in layout_violations(tmp_path)]
    assert found == [
        "transfer_platform_tests/api/test_y.py:3: imports transfer_platform_tests.api.test_x",
        "transfer_platform_tests/api/test_y.py:4: imports transfer_platform_tests.config.test_config",
        "transfer_platform_tests/api/test_y.py:5: imports transfer_platform_tests.config.test_config",
        "transfer_platform_tests/conftest.py:2: imports transfer_platform_tests.api.test_x.fixture",
        "benchmarks/common.py:2: imports transfer_platform_tests.support.postgres",
        "transfer_platform/orchestration/worker.py:5: imports dagster._core.events.DagsterEvent",
        "transfer_platform/orchestration/worker.py:6: imports dagster._check",
        "transfer_platform/orchestration/worker.py:7: names 'dagster._cli.api'",
        "transfer_platform/orchestration/worker.py:10: imports dagster._utils",
    ]
