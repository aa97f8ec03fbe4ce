"""The documentation stays true: its configuration examples validate, and the configuration
reference (docs/configuration.md) lists exactly the fields of the configuration models.

YAML blocks in README.md and docs/*.md (the conventions of docs/README.md):

- a ```` ```yaml ```` block is a complete configuration file: it is written to a file and loaded
  by :func:`load_config`, the loader ``transfer-platform validate`` runs, with every environment
  variable it names set (to a real signing key, which any secret accepts);
- ``<!-- yaml: fragment -->`` on the line before: a part of a file, added to the README's first
  complete file (its lists extended, its other keys replaced) and loaded the same way;
- ``<!-- yaml: other -->`` on the line before: YAML that is not a configuration file; only parsed.

The reference: each table after ``<!-- reference: ClassName ... -->`` documents those pydantic
models; together the tables must name every field of every model reachable from
:class:`PlatformConfig`, no field that does not exist, the right required-ness, and, where a
default is written as a literal, the model's default.
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from transfer_platform.config import models as config_models
from transfer_platform.config.loading import load_config
from transfer_platform.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKERS = {"fragment", "other"}
_FENCE = re.compile(r"^```(\S*)\s*$")
_MARKER = re.compile(r"^<!--\s*yaml:\s*(\S+)\s*-->$")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\{\s*env:\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    kind: str  # "complete", "fragment", "other"
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def yaml_blocks(page: Path) -> list[Block]:
    """The page's ```yaml blocks with the kind their marker gives (none: complete). A marker before
    anything but a ```yaml block, or an unknown marker, is an error of the page."""
    lines = page.read_text().splitlines()
    blocks, i, marker, marker_line = [], 0, None, 0
    while i < len(lines):
        line = lines[i].strip()
        found = _MARKER.match(line)
        if found:
            if found.group(1) not in MARKERS:
                pytest.fail(f"{page.name}:{i + 1}: unknown marker {found.group(1)!r}; use one of {sorted(MARKERS)}")
            marker, marker_line = found.group(1), i + 1
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            assert end is not None, f"{page.name}:{i + 1}: a code block that is never closed"
            if fence.group(1) in ("yaml", "yml"):
                blocks.append(Block(page, i + 1, marker or "complete", "\n".join(lines[i + 1:end])))
            elif marker:
                pytest.fail(f"{page.name}:{marker_line}: the yaml marker is not followed by a ```yaml block")
            marker, i = None, end + 1
            continue
        if line and marker:
            pytest.fail(f"{page.name}:{marker_line}: the yaml marker is not followed by a ```yaml block")
        i += 1
    return blocks


ALL_BLOCKS = [block for page in PAGES for block in yaml_blocks(page)]


def base_file() -> dict:
    """The README's first complete file: what a fragment is added to."""
    first = next(b for b in ALL_BLOCKS if b.page.name == "README.md" and b.kind == "complete")
    return yaml.safe_load(first.text)


def with_fragment(base: dict, fragment: dict) -> dict:
    merged = dict(base)
    for key, value in fragment.items():
        merged[key] = [*base.get(key, []), *value] if isinstance(value, list) else value
    return merged


@pytest.fixture
def secrets_set(monkeypatch: pytest.MonkeyPatch):
    """Sets every variable a block names; the value is a real signing key, which also serves as a
    dummy password or access key."""
    from transfer_platform.destinations.manifests import new_signing_key

    key = new_signing_key()[0]

    def set_for(text: str) -> None:
        for match in _ENV.finditer(text):
            monkeypatch.setenv(match.group(1) or match.group(2), key)

    return set_for


def validate(raw: dict, folder: Path) -> None:
    """Load ``raw`` as ``transfer-platform validate`` loads a file."""
    path = folder / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    load_config(path)


def test_the_pages_hold_complete_examples() -> None:
    """The checks below are not vacuous: the README's first transfer and the configuration page's
    example are complete files, and the pages hold fragments too."""
    complete = {b.page.name for b in ALL_BLOCKS if b.kind == "complete"}
    assert {"README.md", "configuration.md"} <= complete
    assert any(b.kind == "fragment" for b in ALL_BLOCKS)


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.where)
def test_every_yaml_block_validates(block: Block, tmp_path: Path, secrets_set) -> None:
    raw = yaml.safe_load(block.text)
    if block.kind == "other":
        return  # not a configuration file: parsing it was the check
    assert isinstance(raw, dict), f"{block.where}: not a YAML mapping"
    secrets_set(block.text)
    if block.kind == "fragment":
        secrets_set(next(b for b in ALL_BLOCKS if b.page.name == "README.md" and b.kind == "complete").text)
        raw = with_fragment(base_file(), raw)
    try:
        validate(raw, tmp_path)
    except ConfigError as exc:
        pytest.fail(f"{block.where}: the {block.kind} block does not validate:\n{exc}", pytrace=False)


def test_a_complete_block_that_stops_validating_fails(tmp_path: Path, secrets_set) -> None:
    """The check above fails on a broken file: the README's first transfer with a field misspelt."""
    block = next(b for b in ALL_BLOCKS if b.page.name == "README.md" and b.kind == "complete")
    secrets_set(block.text)
    raw = yaml.safe_load(block.text.replace("organization_column:", "organisation_column:"))
    with pytest.raises(ConfigError, match="organisation_column: unknown field"):
        validate(raw, tmp_path)


# -- the configuration reference ---------------------------------------------------------------

_REFERENCE = re.compile(r"^<!--\s*reference:\s*(.+?)\s*-->$")
HEADER = ["field", "required", "type", "default", "allowed values", "Prequel's name"]


def reference_tables() -> dict[str, list[list[str]]]:
    """{class name: the rows (cells) of the table after its ``<!-- reference: ... -->``}."""
    lines = (ROOT / "docs" / "configuration.md").read_text().splitlines()
    tables: dict[str, list[list[str]]] = {}
    for i, line in enumerate(lines):
        found = _REFERENCE.match(line.strip())
        if not found:
            continue
        rows = []
        for row in lines[i + 1:]:
            if not row.startswith("|"):
                break
            rows.append([cell.strip() for cell in row.strip().strip("|").split("|")])
        assert rows, f"configuration.md:{i + 1}: no table after the reference marker"
        assert rows[0] == HEADER, f"configuration.md:{i + 1}: the table's header must be {HEADER}"
        body = rows[2:]  # one list shared by the models of the table
        for name in found.group(1).split():
            assert name not in tables, f"configuration.md:{i + 1}: {name} is documented twice"
            tables[name] = body
    return tables


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def configuration_models() -> dict[str, type[BaseModel]]:
    """Every pydantic model a configuration file can hold, by class name."""
    found: dict[str, type[BaseModel]] = {}
    todo = [config_models.PlatformConfig]
    while todo:
        model = todo.pop()
        if model.__name__ in found:
            continue
        found[model.__name__] = model
        for field in model.model_fields.values():
            todo += _models_in(field.annotation)
    return found


def field_name(model: type[BaseModel], name: str) -> str:
    return model.model_fields[name].alias or name


def documented_name(cell: str) -> str:
    found = re.fullmatch(r"`([A-Za-z_][A-Za-z0-9_]*)`", cell)
    assert found, f"a field cell must be one backticked name, not {cell!r}"
    return found.group(1)


def reference_problems(models: dict[str, type[BaseModel]], tables: dict[str, list[list[str]]]) -> list[str]:
    """What the reference gets wrong about ``models``: a model without a table or a table without
    a model; a field not listed, or listed but in none of the table's models (a table shared by
    several models, the vendors of a source or destination, lists the union of their fields); a
    field listed twice; *required* "no" for a field without a default or "yes" for one with; a
    default written as a literal (`10`, `multi_tenant`, `[]`) that is not the model's."""
    problems = [f"{name}: no table in docs/configuration.md" for name in sorted(set(models) - set(tables))]
    problems += [f"{name}: documented, but no such configuration model" for name in sorted(set(tables) - set(models))]
    for name in sorted(set(models) & set(tables)):
        model, rows = models[name], tables[name]
        by_name = {field_name(model, f): info for f, info in model.model_fields.items()}
        union = {field_name(models[n], f) for n, r in tables.items() if r is rows and n in models
                 for f in models[n].model_fields}
        documented = [documented_name(row[0]) for row in rows]
        problems += [f"{name}.{f}: listed twice" for f in sorted({f for f in documented if documented.count(f) > 1})]
        problems += [f"{name}.{f}: not in the reference" for f in sorted(set(by_name) - set(documented))]
        problems += [f"{name}.{f}: in the reference, but no such field" for f in sorted(set(documented) - union)]
        for row in rows:
            field, required, default = documented_name(row[0]), row[1], row[3]
            info = by_name.get(field)
            if info is None:
                continue  # another vendor's field in a shared table
            if info.is_required() and "yes" not in required:
                problems.append(f"{name}.{field}: required, documented {required!r}")
            if info.is_required():
                continue
            if required == "yes":
                problems.append(f"{name}.{field}: has a default, documented as required")
            value = info.get_default(call_default_factory=True)
            literal = re.match(r"`([^`]*)`", default)
            if literal and value is not None and not isinstance(value, BaseModel) \
                    and yaml.safe_load(literal.group(1)) != value:
                problems.append(f"{name}.{field}: documented default {literal.group(1)!r}, the model's {value!r}")
    return problems


def test_the_reference_lists_exactly_the_configuration_models_fields() -> None:
    models = configuration_models()
    assert {"PlatformConfig", "ModelConfig", "ColumnConfig", "S3Connection", "EnvRef"} <= set(models)
    assert reference_problems(models, reference_tables()) == []


def test_drift_between_the_models_and_the_reference_fails() -> None:
    """The check above fails when a model gains a field, the page lists one that does not exist,
    a default changes, or a required field is documented as optional."""

    class SparkSettings(config_models.SparkSettings):
        shuffle_partitions: int = 8
        driver_memory: str = "4g"

    class RecipientConfig(config_models.RecipientConfig):
        default_full_refresh_min_start_time_epoch: int  # now required

    models = {**configuration_models(), "SparkSettings": SparkSettings, "RecipientConfig": RecipientConfig}
    tables = reference_tables()
    tables["ModelConfig"] = [*tables["ModelConfig"], ["`retention_days`", "no", "integer", "`30`", "", "-"]]
    del tables["EnvRef"]
    assert reference_problems(models, tables) == [
        "EnvRef: no table in docs/configuration.md",
        "ModelConfig.retention_days: in the reference, but no such field",
        "RecipientConfig.default_full_refresh_min_start_time_epoch: required, documented 'no'",
        "SparkSettings.shuffle_partitions: not in the reference",
        "SparkSettings.driver_memory: documented default '2g', the model's '4g'",
    ]


# -- the layout --------------------------------------------------------------------------------


def layout_block(page: Path) -> list[str]:
    text = page.read_text()
    return text.split("## Layout", 1)[1].split("```\n", 1)[1].split("```", 1)[0].splitlines()


def layout_names(lines: list[str]) -> tuple[set[str], set[str]]:
    """(top-level paths, names inside transfer_platform/) a layout block describes: a line's first
    word is a path at the top level, indented by two spaces inside the folder above it."""
    top, package = set(), set()
    for line in lines:
        if line.startswith("  ") and not line.startswith("   "):
            package.add(line.split()[0].rstrip("/"))
        elif line and not line[0].isspace():
            first = line.split("   ")[0]  # "pyproject.toml, uv.lock   the package ..."
            top |= {part.strip().rstrip("/") for part in first.split(",")}
    return top, package


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "docs" / "design.md"], ids=lambda p: p.name)
def test_the_layout_names_what_is_there(page: Path) -> None:
    top, package = layout_names(layout_block(page))
    assert {p for p in top if not (ROOT / p).exists()} == set(), f"{page.name}: the layout names missing paths"
    assert {p for p in package if not (ROOT / "transfer_platform" / p).exists()} == set()


def test_the_full_layout_names_every_part_of_the_package() -> None:
    _, package = layout_names(layout_block(ROOT / "docs" / "design.md"))
    there = {p.name for p in (ROOT / "transfer_platform").iterdir()
             if p.name not in ("__init__.py", "__pycache__")}
    assert there - package == set(), "docs/design.md's layout does not name these parts of the package"
    assert package - there == set(), "docs/design.md's layout names parts the package does not have"


# -- links -------------------------------------------------------------------------------------

_LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to '-'."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in page.read_text().splitlines() if re.match(r"^#{1,6} ", line)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_between_the_pages_resolve(page: Path) -> None:
    """A relative link names a file that exists and, with '#', a heading of that file."""
    broken = []
    for target in _LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
            broken.append(target)
    assert broken == [], f"{page.name}: links to no such file or heading"
