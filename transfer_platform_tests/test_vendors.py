"""The vendor records (``transfer_platform/vendors/``) hold true: each names a module, class and
configuration class that exist and agree with the configuration's ``vendor:`` choice, the
configuration class sits beside its record, its refused
settings name real fields, its type names cover every data_type; the registry loads no driver;
and no other module switches on a vendor: no comparison of a vendor's name or of a dialect, no
dictionary keyed by vendor names, no ``isinstance`` on a vendor's class outside its own module
(but for the modules of :data:`VENDOR_SPECIFIC`, each with its reason)."""

from __future__ import annotations

import ast
import subprocess
import sys
import tokenize
import typing
from pathlib import Path

import pytest

import transfer_platform
from transfer_platform import vendors
from transfer_platform.config import models
from transfer_platform.core.types import TYPES

PACKAGE = Path(transfer_platform.__file__).parent
REGISTRY = Path(vendors.__file__).parent
RECORDS = [*vendors.SOURCES.values(), *vendors.DESTINATIONS.values()]


def _id(vendor: vendors.Vendor) -> str:
    return f"{vendor.kind}-{vendor.name}"


def _chosen_by_vendor(union: object) -> dict[str, type]:
    """vendor value -> the class the configuration's discriminated union validates it with."""
    (members, *_) = typing.get_args(union)
    return {value: cls for cls in typing.get_args(members)
            for value in typing.get_args(cls.model_fields["vendor"].annotation)}


@pytest.mark.parametrize("vendor", RECORDS, ids=_id)
def test_a_vendor_names_a_class_that_exists(vendor):
    cls = vendor.implementation()
    assert cls.__name__ == vendor.class_name
    assert cls.__module__ == vendor.module


@pytest.mark.parametrize(("registry", "union"), [(vendors.SOURCES, models.SourceConfig),
                                                 (vendors.DESTINATIONS, models.DestinationConfig)],
                         ids=["sources", "destinations"])
def test_each_vendor_value_chooses_the_configuration_class_its_record_names(registry, union):
    assert _chosen_by_vendor(union) == {name: v.config for name, v in registry.items()}
    assert all(name == v.name for name, v in registry.items())


@pytest.mark.parametrize("vendor", RECORDS, ids=_id)
def test_a_vendors_configuration_class_sits_beside_its_record(vendor):
    module = sys.modules[vendor.config.__module__]
    assert Path(module.__file__).parent == REGISTRY
    assert vendor in vars(module).values()


@pytest.mark.parametrize("vendor", RECORDS, ids=_id)
def test_a_configured_entry_finds_its_record(vendor):
    entry = vendor.config.model_construct(vendor=vendor.name)
    assert entry.vendor_record is vendor


def _field(cls: type, setting: str) -> object:
    """The annotation of ``setting`` (names as the file writes them) in ``cls``, or fail."""
    for part in setting.split("."):
        fields = {f.alias or name: f for name, f in cls.model_fields.items()}
        assert part in fields, f"{cls.__name__} has no field {part!r}"
        annotation = fields[part].annotation
        cls = next((a for a in (annotation, *typing.get_args(annotation)) if hasattr(a, "model_fields")), None)
    return annotation


@pytest.mark.parametrize("vendor", [v for v in RECORDS if v.refuses], ids=_id)
def test_a_refused_setting_is_a_field_of_the_vendors_configuration(vendor):
    for refusal in vendor.refuses:
        _field(vendor.config, refusal.setting)
        assert refusal.fix.startswith("remove")


@pytest.mark.parametrize("vendor", [v for v in RECORDS if v.column_types], ids=_id)
def test_a_destination_with_type_names_names_every_data_type(vendor):
    assert set(vendor.column_types) == set(TYPES)


def test_a_record_holds_only_the_facts_of_its_kind():
    assert all(v.kind == "source" and v.tenant_id_rule for v in vendors.SOURCES.values())
    assert not any(v.column_types or v.only_adds_files for v in vendors.SOURCES.values())
    assert all(v.kind == "destination" for v in vendors.DESTINATIONS.values())
    assert not any(v.tenant_id_rule or v.jdbc_jars for v in vendors.DESTINATIONS.values())


def test_the_run_worker_can_warm_every_vendor_module_and_driver():
    warm = vendors.warm_modules()
    assert len(warm) == len(set(warm))
    for vendor in RECORDS:
        assert {vendor.module, *vendor.drivers} <= set(warm)


def test_the_registry_and_the_configuration_load_no_driver_spark_or_dagster():
    heavy = ("psycopg", "pymysql", "pyspark", "dagster", "deltalake", "pyarrow", "boto3", "cryptography", "pandas")
    code = ("import sys, transfer_platform.vendors, transfer_platform.config.loading; "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def _vendor_branches(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """``vendor ==``, ``vendor !=``, ``vendor in``, ``vendor not in`` and ``dialect.name ==`` in
    the code of ``path`` (not in its strings or comments)."""
    with path.open("rb") as file:
        tokens = [t for t in tokenize.tokenize(file.readline)
                  if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT,
                                    tokenize.DEDENT, tokenize.ENCODING)]
    found = []
    for i, token in enumerate(tokens[:-1]):
        after = tokens[i + 1].string
        dialect = token.string == "name" and i > 1 and tokens[i - 2].string == "dialect"
        if token.type == tokenize.NAME and (token.string == "vendor" or dialect) and after in ("==", "!=", "in", "not"):
            found.append(f"{path.relative_to(root)}:{token.start[0]}: {token.line.strip()}")
    return found


def test_no_module_but_the_registry_switches_on_a_vendors_name():
    branches = [branch for path in sorted(PACKAGE.rglob("*.py")) if REGISTRY not in path.parents
                for branch in _vendor_branches(path)]
    assert branches == [], "read the vendor's record (transfer_platform/vendors/) instead of its name"


#: every vendor's name, and its classes: its reader or writer and its configuration class
VENDOR_NAMES = frozenset(v.name for v in RECORDS)
VENDOR_CLASSES = frozenset(name for v in RECORDS for name in (v.class_name, v.config.__name__))


def _home(vendor: vendors.Vendor) -> Path:
    """A vendor's own code: its module, or the package named for it that holds the module."""
    path = PACKAGE.parent / (vendor.module.replace(".", "/") + ".py")
    return path.parent if path.parent.name == vendor.name else path


HOMES = frozenset(_home(v) for v in RECORDS)

#: modules of the package (paths under it) that key on vendors by design -> why
VENDOR_SPECIFIC: dict[str, str] = {
    "sharing/tables.py": "serves a Delta destination's tables to its recipient (Delta Sharing): Delta's by definition",
    "demo/run.py": "the demo reads back what it delivered into its own destinations (Delta, DuckDB, signed files)",
}


def _named(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _vendor_names_in(node: ast.expr) -> set[str]:
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return {e.value for e in items if isinstance(e, ast.Constant) and e.value in VENDOR_NAMES}


def _vendor_switches(path: Path, root: Path = PACKAGE.parent, homes: frozenset[Path] = HOMES) -> list[str]:
    """What keys on a vendor in ``path``'s code: a comparison with a vendor's name or of a
    dialect (``dialect == ...``, ``x.dialect != ...``, ``... in (<vendor names>)``), a dictionary
    keyed by a vendor's name (``{"postgres": ...}``, ``dict(postgres=...)``), ``isinstance`` on a
    vendor's class outside its ``homes``."""
    found = []
    for node in ast.walk(ast.parse(path.read_bytes())):
        what = None
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn)
                                                 for op in node.ops):
            sides = [node.left, *node.comparators]
            if any(_named(side) == "dialect" for side in sides) or any(_vendor_names_in(side) for side in sides):
                what = "compares a vendor's name or a dialect"
        elif (isinstance(node, ast.Dict) and any(k is not None and _vendor_names_in(k) for k in node.keys)) or (
                isinstance(node, ast.Call) and _named(node.func) == "dict"
                and any(k.arg in VENDOR_NAMES for k in node.keywords)):
            what = "a dictionary keyed by vendor names"
        elif (isinstance(node, ast.Call) and _named(node.func) == "isinstance" and len(node.args) == 2
              and {_named(c) for c in getattr(node.args[1], "elts", [node.args[1]])} & VENDOR_CLASSES
              and not any(home == path or home in path.parents for home in homes)):
            what = "isinstance on a vendor's class"
        if what:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {what}: {ast.unparse(node)[:80]}")
    return sorted(found, key=lambda line: int(line.split(":")[1]))


def test_no_module_keys_on_a_vendor_but_its_own():
    switches = [switch for path in sorted(PACKAGE.rglob("*.py")) if REGISTRY not in path.parents
                and path.relative_to(PACKAGE).as_posix() not in VENDOR_SPECIFIC
                for switch in _vendor_switches(path)]
    assert switches == [], ("declare the difference (a route, a dialect's hook, a field of the vendor's record) "
                            "instead:\n" + "\n".join(switches))


def test_the_vendor_specific_modules_exist():
    assert [name for name in VENDOR_SPECIFIC if not (PACKAGE / name).is_file()] == []


def test_the_switch_finder_finds_each_kind(tmp_path):
    sample = tmp_path / "sample.py"
    lines = ['"""dialect == \'mysql\' in a docstring"""',
             "if dialect == 'x':", "    pass",
             "ok = self.dialect != other",
             "ports = {'postgres': 5432}",
             "seen = kind in ('mysql', 'csv')",
             "if isinstance(reader, PostgresReader):", "    pass",
             "if isinstance(frame, (dict, MysqlWriter)):", "    pass",
             "fine = {'csv': 1}",
             "also_fine = isinstance(reader, dict) and dialect is None",
             "ports = dict(snowflake=443)", "fine_too = dict(csv=1)"]
    sample.write_text("\n".join(lines) + "\n")
    found = _vendor_switches(sample, tmp_path, frozenset())
    assert [int(line.split(":")[1]) for line in found] == [2, 4, 5, 6, 7, 9, 13]
    at_home = _vendor_switches(sample, tmp_path, frozenset({sample}))  # isinstance in its own module: fine
    assert [int(line.split(":")[1]) for line in at_home] == [2, 4, 5, 6, 13]


def test_the_branch_finder_finds_a_branch(tmp_path):
    sample = tmp_path / "sample.py"
    lines = ['"""if vendor == \'x\': in a string"""', "# vendor == 'x' in a comment",
             "if source.vendor == 'mysql':", "    pass", "ok = vendor not in ('a',)", "d = self.dialect.name != 'x'"]
    sample.write_text("\n".join(lines) + "\n")
    found = _vendor_branches(sample, tmp_path)
    assert [line.split(": ", 1)[1] for line in found] == [lines[2], lines[4], lines[5]]
