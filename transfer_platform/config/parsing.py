"""Finding, reading and validating the configuration file (``loading.py`` adds the store's
entries to it)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from transfer_platform import vendors
from transfer_platform.config.cross_checks import check_config
from transfer_platform.config.models import PlatformConfig
from transfer_platform.errors import ConfigError, Problem

ENV_VAR = "TRANSFER_PLATFORM_CONFIG"
DEFAULT_FILE = "transfer_platform.yaml"
_VENDOR_TAGS = set(vendors.SOURCES) | set(vendors.DESTINATIONS)


def find_config_path(explicit: str | os.PathLike[str] | None = None) -> Path:
    """``--config PATH``, else ``$TRANSFER_PLATFORM_CONFIG``, else ``./transfer_platform.yaml``."""
    if explicit:
        return Path(explicit)
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    return Path.cwd() / DEFAULT_FILE


def read_file(path: str | os.PathLike[str] | None = None) -> tuple[Path, dict[str, Any]]:
    """The configuration file as written (not validated, without the store's entries)."""
    config_path = find_config_path(path)
    if not config_path.is_file():
        raise ConfigError(
            [Problem(str(config_path), "configuration file not found",
                     f"pass --config PATH, set {ENV_VAR}, or create {DEFAULT_FILE} in the working directory")]
        )
    try:
        raw = _parse(config_path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError([Problem(str(config_path), f"not valid YAML: {exc}", "fix the YAML syntax")],
                          source=str(config_path)) from None
    if raw is None or raw == {}:
        raise ConfigError([Problem(str(config_path), "the configuration file is empty",
                                   "add its sources, models, recipients and destinations (see the "
                                   "configuration reference), or point --config at the right file")],
                          source=str(config_path))
    if not isinstance(raw, dict):
        raise ConfigError([Problem("(top level)", "expected a mapping with sources, models, recipients, destinations",
                                   "see docs/configuration.md")], source=str(config_path))
    return config_path, raw


def _parse(text: str) -> Any:
    """The document: a JSON object (JSON is YAML; a file generated for thousands of recipients
    is read by the json module, ~100x faster than PyYAML), else YAML through libyaml's
    parser where PyYAML has it (the same safe loading, ~10x faster than the pure Python one)."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass  # YAML's flow style, or not valid: YAML's loader says what is wrong and where
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def parse_config(raw: Any, *, base_dir: Path | None = None, now: datetime | None = None,
                 source: str | None = None) -> PlatformConfig:
    if not isinstance(raw, dict):
        raise ConfigError([Problem("(top level)", "expected a mapping with sources, models, recipients, destinations",
                                   "see docs/configuration.md")], source=source)
    try:
        config = PlatformConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(problems_from_validation(exc), source=source) from None
    problems = check_config(config, now or datetime.now(UTC))
    if problems:
        raise ConfigError(problems, source=source)
    return _resolve_paths(config, base_dir) if base_dir else config


def _resolve_paths(config: PlatformConfig, base_dir: Path) -> PlatformConfig:
    """File paths in connections are relative to the configuration file's folder."""

    def fix(entry):
        path = getattr(entry.connection, "path", None)
        if path is None or path.is_absolute():
            return entry
        connection = entry.connection.model_copy(update={"path": (base_dir / path).resolve()})
        return entry.model_copy(update={"connection": connection})

    return config.model_copy(update={
        "sources": [fix(s) for s in config.sources],
        "destinations": [fix(d) for d in config.destinations],
    })


def problems_from_validation(exc: ValidationError, prefix: tuple[Any, ...] = ()) -> list[Problem]:
    """Pydantic's errors as problems, each with its field's path (after ``prefix``) and a fix."""
    problems = []
    for error in exc.errors(include_url=False):
        path = _format_location(prefix + tuple(error["loc"]))
        kind = error["type"]
        message = error["msg"].removeprefix("Value error, ")
        fix = ""
        if kind == "extra_forbidden":
            message = "unknown field"
            fix = "remove it or check its spelling against the configuration reference (docs/configuration.md)"
        elif kind == "missing":
            fix = "add this field"
        elif kind == "union_tag_invalid":
            registry = vendors.DESTINATIONS if (prefix + tuple(error["loc"]))[:1] in (("destinations",), ("destination",)) else vendors.SOURCES
            fix = f"use one of the vendors: {vendors.supported(registry)}"
        elif kind == "string_pattern_mismatch":
            fix = "use only letters, digits and underscores"
        elif given := (error.get("ctx") or {}).get("fix"):  # config.entries.refusal
            fix = given
        else:
            fix = _fix_of(kind, error.get("ctx") or {})
        problems.append(Problem(path, message, fix))
    return problems


#: the fix of a pydantic error type (its ``ctx`` fills the bounds in)
_FIXES = {
    "string_too_long": "shorten it to at most {max_length} characters",
    "string_too_short": "give at least {min_length} character(s)",
    "too_long": "give at most {max_length} item(s)",
    "too_short": "give at least {min_length} item(s)",
    "greater_than": "give a number greater than {gt}",
    "greater_than_equal": "give a number of at least {ge}",
    "less_than": "give a number less than {lt}",
    "less_than_equal": "give a number of at most {le}",
    "finite_number": "give a finite number",
    "literal_error": "use one of: {expected}",
    "enum": "use one of: {expected}",
    "string_type": "give text (a quoted string)",
    "int_type": "give a whole number",
    "int_parsing": "give a whole number",
    "int_from_float": "give a whole number",
    "float_type": "give a number",
    "float_parsing": "give a number",
    "bool_type": "give true or false",
    "bool_parsing": "give true or false",
    "dict_type": "give a mapping of fields (an object)",
    "model_type": "give a mapping of fields (an object)",
    "model_attributes_type": "give a mapping of fields (an object)",
    "list_type": "give a list",
    "url_parsing": "give a full URL (https://host/path)",
    "url_scheme": "give a URL with one of the schemes: {expected_schemes}",
}


def _fix_of(kind: str, context: dict[str, Any]) -> str:
    """How to fix a field pydantic refused: its type's words, else the reference's."""
    try:
        return _FIXES[kind].format(**context)
    except (KeyError, IndexError):
        return "give a value as the configuration reference (docs/configuration.md) describes this field"


#: an entry named by its position in the file's list (``recipients[5] (acme)``, ``models[0]``)
_INDEXED = re.compile(r"\b(sources|models|recipients|destinations)\[(\d+)\](?: \(([A-Za-z0-9_]*)\))?")


def entries_by_name(text: str, names: Mapping[str, Sequence[str]] | None = None) -> str:
    """``text`` (a problem's path or message) with each entry named by its name, as a client of the
    REST API knows it (``recipients.acme.id_in_provider_system``), not by its position in the
    configuration the file's and the store's entries merge into (``recipients[5] (acme)...``).
    ``names``: each kind's names in that order, for a position given without its name."""

    def named(match: re.Match[str]) -> str:
        kind, index, name = match.groups()
        if name is None:
            listed = (names or {}).get(kind) or ()
            if int(index) >= len(listed):
                return match.group(0)
            name = listed[int(index)]
        return f"{kind}.{name}"

    return _INDEXED.sub(named, text)


def _format_location(loc: tuple[Any, ...]) -> str:
    text = ""
    previous: Any = None
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in _VENDOR_TAGS and (isinstance(previous, int) or previous in ("destination", "source")):
            pass  # the discriminator pydantic inserts after a list index (or an API body's entry)
        elif previous == "connection" and part in ("folder", "bucket"):
            pass  # the kind of a folder-or-bucket connection (config/connection_settings.py)
        else:
            text += f".{part}" if text else str(part)
        previous = part
    return text or "(top level)"
