"""The house's layout holds (the issue "a house for many vendors"), read from the code's syntax
trees, not its text:

- no test module imports another: what tests share is in ``transfer_platform_tests/support/``
  (conftest.py files are test code too: they may import support, nothing else of the tests);
- the benchmarks import no test code (``benchmarks/`` stands on its own and on the product);
- Dagster's private names are reached only through ``transfer_platform/orchestration/
  dagster_internals.py``: no other module of the product imports a ``dagster._...`` module (or a
  ``_name`` from ``dagster``), nor names one in a string other than a docstring;
- the product stands on floors (:data:`FLOORS`, bottom to top; a part of the package is a
  subpackage or a module at its root): an import goes to a module of its own floor or one below,
  never up, whether it runs when the module loads, in a function, or for annotations only
  (``if TYPE_CHECKING:``); a part on no floor is a violation (a new part is given its floor);
- no import cycle joins modules of different parts of the package (function-level imports
  included), so no loop runs across floors either (one across floors has an import up);
- an exception to the floors is an import named in :data:`UPWARD`, with why it stands (it counts
  for neither rule).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS, SUPPORT = "transfer_platform_tests", "transfer_platform_tests.support"
DOOR = Path("transfer_platform/orchestration/speed/dagster_internals.py")
PACKAGE = "transfer_platform"

#: The floors of the product, bottom to top: the parts of the package on each (a subpackage, or a
#: module at the package's root). Data flows down them: the command line and the API hand a
#: transfer to Dagster's side, which runs it; a transfer reads through a source and writes through
#: a destination, both over the object stores and the runtime's Spark and connections; all of them
#: read the configuration, whose models stand on the pure core.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors", "tuning", "phases", "probes"),  # the error types, the sizes passed in, phase logs, test-connection's checks
    ("core",),  # the pure core
    ("network",),  # the address policy: where a destination may make the platform connect
    ("config", "vendors"),  # the configuration's models, loading and checks; each vendor's record and classes
    ("store", "storage"),  # the control plane's store; object stores and their locks
    ("runtime",),  # the Spark session and shared server, connections, the resident process, the fork server
    ("sources", "destinations", "sharing"),  # sharing: a delta destination's tables served to its recipient
    ("transfers",),  # a transfer's lifecycle, runner and checks
    ("orchestration",),  # Dagster's side
    ("webhooks",),  # events delivered from Dagster's runs and the store
    ("api", "demo", "definitions", "console"),  # the REST API, the demo, Dagster's definitions, terminal output
    ("cli", "executable", "dagster_dev"),  # the command line, its executable, `dagster dev`
)

#: Imports up a floor that stand, (importer, imported module) -> why.
UPWARD: dict[tuple[str, str], str] = {
    ("transfer_platform.config.loading", "transfer_platform.store.resources"): (
        "load_config adds the entries of the store a configuration file names (a function-level import, "
        "only when the file has a `store`); the store validates what it holds with the configuration's own "
        "models and checks, so it stands above them"),
    ("transfer_platform.core.columns", "transfer_platform.config.models"): (
        "annotations only (if TYPE_CHECKING): the pure planning of a model's columns names the configuration "
        "types it reads (ModelConfig, ColumnConfig), and imports nothing of them at run time"),
    ("transfer_platform.core.planning", "transfer_platform.config.models"): (
        "annotations only (if TYPE_CHECKING): windowing_for reads a model's time settings from the configuration "
        "it names (PlatformConfig, ModelConfig), and imports nothing of them at run time"),
}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_bytes(), filename=str(path))


def _imports(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of each module or name ``path`` imports, relative imports resolved:
    ``from a.b import c`` gives ``a.b.c``."""
    tree = _tree(path)
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
        tree = _tree(path)
        docstrings = _docstrings(tree)
        found += [(node.lineno, f"names {node.value!r} (Dagster's private names go through {DOOR})")
                  for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value.startswith("dagster._") and id(node) not in docstrings]
    return sorted(found)


def _part(module: str) -> str | None:
    """The part of the package ``module`` is in (``transfer_platform.runtime.resident``: ``runtime``)."""
    parts = module.split(".")
    return parts[1] if parts[0] == PACKAGE and len(parts) > 1 else None


def _floor_of(part: str, floors: tuple[tuple[str, ...], ...]) -> int | None:
    return next((i for i, floor in enumerate(floors) if part in floor), None)


def _module_graph(root: Path) -> dict[str, tuple[Path, list[tuple[int, str]]]]:
    """Each module of the package: its file and (line, module) of each module of the package it
    imports (``from a.b import c``: the module ``a.b.c`` if there is one, else ``a.b``)."""
    files = {_module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}
    graph = {}
    for module, path in files.items():
        edges = []
        for line, name in _imports(path, root):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if _part(name) is not None and name != module and (line, name) not in edges:
                edges.append((line, name))
        graph[module] = (path, edges)
    return graph


def _cycles(edges: dict[str, set[str]]) -> Iterable[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(edges.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        yield sorted(component)


def _path(start: str, goal: str, edges: dict[str, set[str]], within: set[str]) -> list[str]:
    """A shortest import path from ``start`` to ``goal`` through modules of ``within``."""
    came_from: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier and goal not in came_from:
        following = []
        for node in frontier:
            for target in sorted(edges[node] & within):
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    path = [goal]
    while (previous := came_from[path[-1]]) is not None:
        path.append(previous)
    return path[::-1]


def _crossing_loop(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A loop of ``component`` (a strongly connected set of modules) through an import from one
    part to another: that import, then a shortest way back."""
    within = set(component)
    here, there = next((m, t) for m in component for t in sorted(edges[m] & within) if _part(m) != _part(t))
    return [here, *_path(there, here, edges, within)]


def floor_violations(root: Path = ROOT, floors: tuple[tuple[str, ...], ...] = FLOORS,
                     upward: dict[tuple[str, str], str] = UPWARD) -> list[tuple[Path, int, str]]:
    """(file, line, what) of each import up a floor, part on no floor and import cycle across
    parts of the package in the tree at ``root``."""
    graph = _module_graph(root)
    found: list[tuple[Path, int, str]] = []
    for part in sorted({p for m in graph if (p := _part(m)) and p != "__init__"}):
        if _floor_of(part, floors) is None:
            found.append((root / PACKAGE / part, 0, f"{PACKAGE}.{part} is on no floor (give it one in FLOORS)"))
    edges: dict[str, set[str]] = {}
    for module, (path, imports) in graph.items():
        edges[module] = set()
        for line, target in imports:
            if (module, target) in upward:
                continue
            edges[module].add(target)
            here, there = _floor_of(_part(module) or "", floors), _floor_of(_part(target) or "", floors)
            if here is not None and there is not None and there > here:
                found.append((path, line, f"imports {target} (up a floor: {_part(target)} stands above {_part(module)})"))
    for component in _cycles(edges):
        if len({_part(m) for m in component}) > 1:
            loop = _crossing_loop(component, edges)
            line = next(n for n, target in graph[loop[0]][1] if target == loop[1])
            found.append((graph[loop[0]][0], line, f"an import cycle across parts: {' -> '.join(loop)}"))
    return found


def layout_violations(root: Path = ROOT) -> list[str]:
    """``<file>:<line>: <what>`` for each break of the layout's rules in the tree at ``root``."""
    paths = [p for top in (TESTS, "benchmarks", "transfer_platform") for p in sorted((root / top).rglob("*.py"))
             if p.relative_to(root) != DOOR]
    found = [(path, line, what) for path in paths for line, what in _file_violations(path, root)]
    found += floor_violations(root) if (root / PACKAGE).is_dir() else []
    return [f"{path.relative_to(root)}:{line}: {what}" for path, line, what in found]


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
        "transfer_platform/orchestration/speed/dagster_internals.py": (
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


def test_the_checker_finds_imports_up_a_floor_and_cycles_across_parts(tmp_path):
    files = {
        "transfer_platform/__init__.py": "",
        "transfer_platform/errors.py": "",
        "transfer_platform/cli.py": "from transfer_platform.runtime import resident\nimport transfer_platform.errors\n",
        "transfer_platform/runtime/__init__.py": "",
        "transfer_platform/runtime/resident.py": (
            "import os\n"
            "from transfer_platform.runtime import forks\n"
            "def main():\n"
            "    from transfer_platform.cli import main as run_here\n"),
        "transfer_platform/runtime/forks.py": "from . import resident\n",  # a cycle within a part: allowed
        "transfer_platform/storage/__init__.py": "",
        "transfer_platform/storage/s3.py": "from ..runtime.forks import package_stamp\n",
        "transfer_platform/sources/__init__.py": "",
        "transfer_platform/sources/staging.py": (
            "from transfer_platform.storage.s3 import S3Store\n"
            "from transfer_platform.destinations import delta\n"),
        "transfer_platform/destinations/__init__.py": "",
        "transfer_platform/destinations/delta.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from transfer_platform.transfers.runner import Runner\n"
            "def stage():\n"
            "    from transfer_platform.sources import staging\n"),
        "transfer_platform/transfers/__init__.py": "",
        "transfer_platform/transfers/runner.py": "from transfer_platform.storage.s3 import S3Store\n",
        "transfer_platform/config/__init__.py": "",
        "transfer_platform/config/loading.py": "def load():\n    from transfer_platform.store.resources import merge\n",
        "transfer_platform/store/__init__.py": "",
        "transfer_platform/store/resources.py": "from transfer_platform.config.loading import load\n",
        "transfer_platform/gadgets/__init__.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = [v.split(" (")[0] for v in layout_violations(tmp_path)]
    assert found == [
        "transfer_platform/gadgets:0: transfer_platform.gadgets is on no floor",
        "transfer_platform/destinations/delta.py:3: imports transfer_platform.transfers.runner",
        "transfer_platform/runtime/resident.py:4: imports transfer_platform.cli",
        "transfer_platform/storage/s3.py:1: imports transfer_platform.runtime.forks",
        "transfer_platform/cli.py:1: an import cycle across parts: transfer_platform.cli"
        " -> transfer_platform.runtime.resident -> transfer_platform.cli",
        # sources and destinations share a floor, but no loop joins them
        "transfer_platform/destinations/delta.py:5: an import cycle across parts: transfer_platform.destinations.delta"
        " -> transfer_platform.sources.staging -> transfer_platform.destinations.delta",
    ]
