"""Checks across the configuration (references between entries, one-of rules, sizes).

Each returns problems with a path and a fix; nothing here raises.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from transfer_platform.config.models import PlatformConfig, last_modified_kind
from transfer_platform.core.last_modified import DATA_TYPE_OF_KIND
from transfer_platform.core.timeutil import from_epoch_seconds
from transfer_platform.core.windows import grid_for_window
from transfer_platform.errors import Problem

#: Dagster advises at most 100,000 partitions per asset
MAX_PARTITIONS_PER_ASSET = 100_000


def _duplicates(names: list[str]) -> list[str]:
    return [name for name, count in Counter(names).items() if count > 1]


#: names listed in a fix at most (a file of 10,000 recipients would otherwise list them all)
KNOWN_LISTED = 20


def _known(names: list[str]) -> str:
    if not names:
        return "(none configured)"
    listed = ", ".join(repr(n) for n in names[:KNOWN_LISTED])
    return listed if len(names) <= KNOWN_LISTED else f"{listed}, ... ({len(names) - KNOWN_LISTED} more)"


def check_config(config: PlatformConfig, now: datetime) -> list[Problem]:
    problems: list[Problem] = []
    for kind, names in (
        ("sources", [s.name for s in config.sources]),
        ("models", [m.model_name for m in config.models]),
        ("recipients", [r.name for r in config.recipients]),
        ("destinations", [d.name for d in config.destinations]),
    ):
        for name in _duplicates(names):
            problems.append(Problem(kind, f"the name {name!r} is used more than once",
                                    "give each entry its own name"))
    for i, recipient in enumerate(config.recipients):
        if "\x00" in recipient.id_in_provider_system:
            problems.append(Problem(f"recipients[{i}] ({recipient.name}).id_in_provider_system",
                                    "contains a NUL character, which no source can store or match",
                                    "remove the NUL character"))
    problems += _check_start_epochs(config, now)
    problems += _check_models(config, now)
    problems += _check_destinations(config)
    problems += _check_schema_tenants(config)
    problems += _check_settings_without_effect(config)
    problems += _check_clients(config)
    return problems


#: seconds in an average Gregorian year (to name the year a misread epoch would be)
_SECONDS_PER_YEAR = 31_556_952


def start_epoch_problem(seconds: int, now: datetime) -> tuple[str, str] | None:
    """What is wrong with a start given in seconds since 1970 (``min_start_time_epoch``,
    ``default_full_refresh_min_start_time_epoch``) and its fix, or ``None``: a start after
    ``now`` moves nothing (and one in milliseconds lies beyond any date a clock can hold)."""
    now_seconds = int(now.timestamp())
    if seconds <= now_seconds:
        return None
    year = 1970 + seconds // _SECONDS_PER_YEAR
    # from 1e11 on, seconds are past the year 5000 while milliseconds are after 1973 (and so on)
    for unit, factor in (("milliseconds", 1_000), ("microseconds", 1_000_000), ("nanoseconds", 1_000_000_000)):
        if seconds >= factor * 100_000_000 and seconds // factor <= now_seconds:
            return (f"{seconds} looks like {unit} since 1970: read as seconds it is the year {year}",
                    f"write seconds since 1970: {seconds // factor}")
    if year > 9999:
        return (f"{seconds} is not a time in seconds since 1970 (it would be the year {year})",
                f"write the earliest time to transfer in seconds since 1970 (now is {now_seconds})")
    return (f"{seconds} is in the future ({from_epoch_seconds(seconds):%Y-%m-%d %H:%M:%S} UTC): no row "
            "could be transferred before then",
            f"write the earliest last-modified time to transfer, in seconds since 1970 (now is {now_seconds})")


def _check_start_epochs(config: PlatformConfig, now: datetime) -> list[Problem]:
    problems: list[Problem] = []
    for i, model in enumerate(config.models):
        problem = start_epoch_problem(model.min_start_time_epoch, now)
        if problem:
            problems.append(Problem(f"models[{i}] ({model.model_name}).min_start_time_epoch", *problem))
    for i, recipient in enumerate(config.recipients):
        start = recipient.default_full_refresh_min_start_time_epoch
        problem = None if start is None else start_epoch_problem(start, now)
        if problem:
            problems.append(Problem(f"recipients[{i}] ({recipient.name}).default_full_refresh_min_start_time_epoch",
                                    *problem))
    return problems


def _check_models(config: PlatformConfig, now: datetime) -> list[Problem]:
    problems: list[Problem] = []
    source_names = [s.name for s in config.sources]
    for i, model in enumerate(config.models):
        path = f"models[{i}] ({model.model_name})"
        if model.source_name not in source_names:
            problems.append(Problem(f"{path}.source_name", f"unknown source {model.source_name!r}",
                                    f"use one of the configured sources: {_known(source_names)}"))
        if (model.source_table is None) == (model.source_query is None):
            problems.append(Problem(path, "exactly one of source_table and source_query must be set",
                                    "set source_table: schema.table, or source_query: SELECT ..."))
        last_modified = [c for c in model.columns if c.is_last_modified]
        if len(last_modified) != 1:
            found = ", ".join(c.name_in_source for c in last_modified) or "none"
            problems.append(Problem(f"{path}.columns",
                                    f"needs exactly one last-modified column, found {found}",
                                    "mark the column that holds the row's update time with "
                                    "is_last_modified: true (and only that one)"))
        else:
            problems += _check_last_modified(f"{path}.columns ({last_modified[0].name_in_source})",
                                             last_modified[0])
        for column in model.columns:
            if not column.is_last_modified and (column.last_modified_format or column.datetime_format):
                problems.append(Problem(f"{path}.columns ({column.name_in_source})",
                                        "last_modified_format and datetime_format describe the "
                                        "last-modified column, and this column is not it",
                                        "move them to the column with is_last_modified: true"))
        problems += _check_deletion_marker(path, model)
        if model.delete_detection == "none" and "delete_sweep_frequency_minutes" in model.model_fields_set:
            problems.append(Problem(f"{path}.delete_sweep_frequency_minutes",
                                    "is set but delete_detection is none, so no sweep runs",
                                    "set delete_detection: sweep, or remove delete_sweep_frequency_minutes"))
        if not model.primary_key:
            problems.append(Problem(f"{path}.columns", "no primary key column",
                                    "mark the unique id column(s) with is_primary_key: true"))
        for name in _duplicates([c.destination_name for c in model.columns]):
            problems.append(Problem(f"{path}.columns", f"two columns land in destination column {name!r}",
                                    "give each column its own name_in_destination"))
        if model.source_name in source_names:
            source = config.source(model.source_name)
            text_lm = (len(last_modified) == 1 and source.max_concurrent_queries_per_transfer > 1
                       and last_modified[0].data_type == "string"
                       and last_modified[0].last_modified_format in (None, "text"))
            if text_lm:
                problems.append(Problem(f"{path}.columns ({last_modified[0].name_in_source})",
                                        f"source {source.name!r} splits each read into "
                                        f"{source.max_concurrent_queries_per_transfer} queries on the "
                                        "last-modified column, and Spark cannot split on a text column",
                                        "set max_concurrent_queries_per_transfer: 1 on the source, or "
                                        "use a timestamp, date or epoch last-modified column"))
            if (getattr(source, "staging", None) is not None and len(last_modified) == 1
                    and model.change_column.kind == "text"):
                problems.append(Problem(f"{path}.columns ({last_modified[0].name_in_source})",
                                        f"source {source.name!r} stages reads, which compare a text "
                                        "last-modified value outside the database (its collation "
                                        "could order it differently)",
                                        "use a timestamp, date or epoch column, or remove staging "
                                        "from the source"))
            if source.tenancy == "multi_tenant" and not model.organization_column:
                problems.append(Problem(f"{path}.organization_column",
                                        f"source {source.name!r} is multi-tenant but the model has no "
                                        "organization_column, so every recipient would get every row",
                                        "set organization_column to the column holding the tenant id"))
            if source.tenancy == "schema_tenanted" and model.source_table and "." in model.source_table:
                problems.append(Problem(f"{path}.source_table",
                                        f"source {source.name!r} is schema-tenanted, so source_table is "
                                        f"the table's name inside each recipient's schema, not "
                                        f"{model.source_table!r}",
                                        "write the bare table name (events, not public.events); the "
                                        "schema is the recipient's id_in_provider_system"))
        problems += _check_partition_count(config, model, path, now)
    return problems


def _check_deletion_marker(path: str, model) -> list[Problem]:  # a ModelConfig
    """A soft-delete marker is one boolean or timestamp column that is neither key nor
    last-modified, on a model that can remove rows; ``keep_deleted_rows`` needs one."""
    markers = [c for c in model.columns if c.is_deleted_marker]
    if not markers:
        if model.keep_deleted_rows:
            return [Problem(f"{path}.keep_deleted_rows", "is set but no column is marked "
                            "is_deleted_marker, so no row is ever marked deleted",
                            "mark the column that flags deleted rows with is_deleted_marker: true, or "
                            "remove keep_deleted_rows")]
        return []
    if len(markers) > 1:
        return [Problem(f"{path}.columns", "more than one column is marked is_deleted_marker ("
                        f"{', '.join(c.name_in_source for c in markers)})",
                        "mark only the one column that flags deleted rows")]
    (marker,) = markers
    where = f"{path}.columns ({marker.name_in_source})"
    if marker.data_type not in ("boolean", "timestamp"):
        return [Problem(where, f"a deletion marker must be boolean (deleted when true) or timestamp "
                               f"(deleted when not NULL), not {marker.data_type}",
                        "give the column data_type boolean or timestamp, or convert it in a source_query")]
    if marker.is_primary_key or marker.is_last_modified:
        return [Problem(where, "the deletion marker cannot be the primary key or the last-modified column",
                        "mark a column of its own (is_deleted / deleted_at) with is_deleted_marker: true")]
    if model.is_append_only:
        return [Problem(where, "an is_append_only model never changes a delivered row, so a later "
                               "delete could never reach it",
                        "drop is_append_only from the model, or is_deleted_marker from the column")]
    return []


def _check_last_modified(path: str, column) -> list[Problem]:  # a ColumnConfig
    """The last-modified column's kind agrees with its data_type (the destination gets the values
    as the source holds them) and, for text, its format sorts in time order."""
    try:
        kind = last_modified_kind(column)
    except ValueError as exc:
        what, fix = exc.args
        return [Problem(path, what, fix)]
    needed = DATA_TYPE_OF_KIND[kind.kind]
    if column.data_type != needed:
        return [Problem(path, f"last_modified_format {kind.kind} holds {needed} values but the "
                              f"column has data_type {column.data_type}",
                        f"give it data_type: {needed} (the destination receives the source's values)")]
    if column.datetime_format is not None and kind.kind != "text":
        return [Problem(path, f"datetime_format is set but the column is read as {kind.kind}",
                        "remove datetime_format, or give the column data_type: string")]
    return []


def _check_partition_count(config: PlatformConfig, model, path: str, now: datetime) -> list[Problem]:
    if model.max_transfer_time_window_seconds is None:
        return []
    grid = grid_for_window(model.max_transfer_time_window_seconds)
    starts = [model.min_start_time_epoch] + [
        r.default_full_refresh_min_start_time_epoch for r in config.recipients
        if r.default_full_refresh_min_start_time_epoch is not None
    ]
    if any(start_epoch_problem(start, now) for start in starts):
        return []  # reported by _check_start_epochs
    earliest = from_epoch_seconds(min(starts))
    count = int((now - earliest).total_seconds() // grid.seconds) + 1
    if count <= MAX_PARTITIONS_PER_ASSET:
        return []
    return [Problem(f"{path}.max_transfer_time_window_seconds",
                    f"windows of {grid.seconds} s from {earliest:%Y-%m-%d %H:%M:%S} UTC give {count:,} "
                    f"partitions; Dagster supports at most {MAX_PARTITIONS_PER_ASSET:,} per asset",
                    "set min_start_time_epoch closer to your oldest rows, or a larger window")]


def _check_destinations(config: PlatformConfig) -> list[Problem]:
    problems: list[Problem] = []
    recipient_names = [r.name for r in config.recipients]
    model_names = [m.model_name for m in config.models]
    recipients, models = set(recipient_names), set(model_names)  # looked up once per destination
    for i, destination in enumerate(config.destinations):
        path = f"destinations[{i}] ({destination.name})"
        if destination.recipient not in recipients:
            problems.append(Problem(f"{path}.recipient", f"unknown recipient {destination.recipient!r}",
                                    f"use one of the configured recipients: {_known(recipient_names)}"))
        for model_name in destination.enabled_models:
            if model_name not in models:
                problems.append(Problem(f"{path}.enabled_models", f"unknown model {model_name!r}",
                                        f"use configured models: {_known(model_names)} "
                                        "(or leave the list empty for all)"))
    for i, destination in enumerate(config.destinations):
        path = f"destinations[{i}] ({destination.name})"
        problems += destination.problems(path)
        if destination.vendor_record.only_adds_files:  # the hard-delete sweep deletes rows
            problems += [Problem(f"{path}.vendor", f"model {m.model_name!r} has delete_detection: sweep, "
                                 f"which a {destination.vendor} destination cannot apply (it only adds files)",
                                 f"set delete_detection: none on {m.model_name}, or leave it out of this "
                                 "destination's enabled_models")
                         for m in config.models_for(destination) if m.delete_detection == "sweep"]
    problems += _check_shared_places(config)
    problems += _check_staging_places(config)
    return problems


def _check_staging_places(config: PlatformConfig) -> list[Problem]:
    """A source's staging folder or bucket prefix must not overlap a destination's place: it
    holds every tenant's rows, which the destination's recipient could then read."""
    problems = []
    for i, source in enumerate(config.sources):
        staging = getattr(source, "staging", None)
        if staging is None:
            continue
        place = staging.place()
        for destination in config.destinations:
            if place.overlaps(destination.place()):
                problems.append(Problem(
                    f"sources[{i}] ({source.name}).staging", f"the staging of source {source.name!r} ({place.description}) and "
                    f"destination {destination.name!r} ({destination.place().description}) overlap: its "
                    "recipient could read every tenant's staged rows",
                    "give the staging a folder or bucket prefix of its own, outside every destination's"))
    return problems


def _check_shared_places(config: PlatformConfig) -> list[Problem]:
    """Destinations whose places overlap (the same, or one inside the other). Each place is looked
    up by its own path and each of its path's prefixes among the places of its kind and container:
    linear in the destinations (comparing every pair took minutes at 10,000)."""
    problems, places = [], [(d.name, d.place()) for d in config.destinations]
    at: dict[tuple, list[int]] = {}  # (kind, container, path) -> positions of the places there
    for i, (_, place) in enumerate(places):
        at.setdefault((place.kind, place.container, place.path), []).append(i)
    pairs: set[tuple[int, int]] = set()
    for j, (_, place) in enumerate(places):
        for length in range(len(place.path) + 1):  # every place at this path or a prefix of it
            for i in at.get((place.kind, place.container, place.path[:length]), ()):
                if i != j:
                    pairs.add((min(i, j), max(i, j)))
    for i, j in sorted(pairs):
        (name, place), (other, other_place) = places[i], places[j]
        where = (place.description if place == other_place
                 else f"{place.description} and {other_place.description}, one inside the other")
        problems.append(Problem(
            "destinations", f"destinations {name}, {other} write to the same place ({where}): their "
            "rows and watermarks would mix, and one recipient could receive another's rows",
            "give each destination its own schema (PostgreSQL), path (Delta, a folder) or "
            "bucket prefix (object storage)"))
    return problems


def _check_schema_tenants(config: PlatformConfig) -> list[Problem]:
    """Each recipient's id must be usable as its schema name in the schema-tenanted sources of the
    models its destination receives."""
    problems: list[Problem] = []
    sources = {s.name: s for s in config.sources}
    recipients = {r.name: (i, r) for i, r in enumerate(config.recipients)}
    seen: set[tuple[str, str]] = set()
    for destination in config.destinations:
        if destination.recipient not in recipients:
            continue
        i, recipient = recipients[destination.recipient]
        for model in config.models_for(destination):
            source = sources.get(model.source_name)
            if source is None or source.tenancy != "schema_tenanted":
                continue
            problem = source.vendor_record.tenant_id_problem(recipient.id_in_provider_system,
                                                             uses_source_query=model.source_query is not None)
            if problem and (recipient.name, problem) not in seen:
                seen.add((recipient.name, problem))
                container = source.vendor_record.tenant_container  # schema, database, folder
                problems.append(Problem(
                    f"recipients[{i}] ({recipient.name}).id_in_provider_system",
                    f"{recipient.id_in_provider_system!r} names the recipient's {container} in "
                    f"schema-tenanted source {source.name!r} (model {model.model_name!r}), but {problem}",
                    f"give the recipient an id_in_provider_system that can name its {container}, and "
                    f"rename the {container} to match"))
    return problems


def _check_settings_without_effect(config: PlatformConfig) -> list[Problem]:
    """Settings that this combination would silently ignore are refused, with the reason."""
    problems: list[Problem] = []
    entries = [(f"sources[{i}] ({s.name})", "source", s) for i, s in enumerate(config.sources)]
    entries += [(f"destinations[{i}] ({d.name})", "destination", d) for i, d in enumerate(config.destinations)]
    for path, kind, entry in entries:
        problems += _refused_settings(path, kind, entry)
    refused = {p.path for p in problems}
    for i, source in enumerate(config.sources):
        path = f"sources[{i}] ({source.name})"
        schema = getattr(source.connection, "schema_", None)
        if schema is not None and source.tenancy == "schema_tenanted" and f"{path}.connection.schema" not in refused:
            problems.append(Problem(f"{path}.connection.schema",
                                    "has no effect on a schema-tenanted source: each recipient's tables "
                                    "are read from the schema named by its id_in_provider_system",
                                    "remove schema from this source's connection"))
    sources = {s.name: s for s in config.sources}
    for i, model in enumerate(config.models):
        source = sources.get(model.source_name)
        if source is not None and source.tenancy == "schema_tenanted" and model.organization_column:
            problems.append(Problem(f"models[{i}] ({model.model_name}).organization_column",
                                    f"has no effect: source {source.name!r} is schema-tenanted, so each "
                                    "recipient gets every row of its own schema and no column is "
                                    "compared with its id",
                                    "remove organization_column from this model (or make the source "
                                    "multi_tenant)"))
    if config.store is None and "api" in config.model_fields_set:
        problems.append(Problem("api", "has no effect without a store: the REST API serves the store's "
                                "recipients, destinations, sources and models",
                                "add a store: section (docs/api.md), or remove api:"))
    return problems


def _check_clients(config: PlatformConfig) -> list[Problem]:
    """Each source's and destination's client installed: a vendor beyond the base install's
    needs its extra (``vendors/record.py``: :class:`Extra`), which ``validate`` names as the fix,
    where a transfer would fail on an ``ImportError``."""
    return [Problem(f"{kind}[{i}] ({entry.name}).vendor",
                    f"vendor {entry.vendor!r} needs {extra.package}, which is not installed here", extra.install)
            for kind, entries in (("sources", config.sources), ("destinations", config.destinations))
            for i, entry in enumerate(entries) for extra in entry.extras() if not extra.installed()]


_ABSENT = object()


def _refused_settings(path: str, kind: str, entry) -> list[Problem]:  # a source or destination
    """The settings of ``entry`` that its vendor's record refuses (they would have no effect)."""
    vendor = entry.vendor_record
    return [Problem(f"{path}.{refusal.setting}", f"has no effect on a {vendor.name} {kind}: {refusal.reason}",
                    refusal.fix)
            for refusal in vendor.refuses
            if _written(entry, refusal.setting) not in (_ABSENT, refusal.allowed)]


def _written(entry, setting: str) -> object:  # a configuration model
    """The value of ``setting`` (a dotted path of the names the file writes, aliases included)
    in ``entry``; ``_ABSENT`` where the entry has no such field."""
    value = entry
    for part in setting.split("."):
        fields = getattr(type(value), "model_fields", {})
        name = next((n for n, f in fields.items() if (f.alias or n) == part), None)
        if name is None:
            return _ABSENT
        value = getattr(value, name)
    return value
