"""Recipients, destinations, sources and models in the store: read into the platform's
configuration, and created, changed and deleted (by the REST API), each change validated by the
configuration file's own models and checks against everything else the platform holds.

A stored entry is the document the file would hold (``{"name": ..., "vendor": ..., ...}``), with
each secret a client sent stored encrypted (``{"encrypted": ...}``). The file's own entries are
listed beside the store's with ``origin: file``; they are changed by editing the file.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import TypeAdapter, ValidationError

from transfer_platform.config.models import (
    DestinationConfig,
    ModelConfig,
    PlatformConfig,
    RecipientConfig,
    SourceConfig,
    StoreSettings,
)
from transfer_platform.config.parsing import (
    entries_by_name,
    parse_config,
    problems_from_validation,
    read_file,
)
from transfer_platform.config.secrets import PLAIN_SECRETS, mask_secrets
from transfer_platform.errors import ConfigError, ConnectionFailure, Problem
from transfer_platform.store import audit, events, prequel
from transfer_platform.store.database import engine_for
from transfer_platform.store.tables import KINDS, magic_links, resources, scoped_tokens

#: a kind's list in the configuration file, and the field holding an entry's name
LISTS = {"source": "sources", "model": "models", "recipient": "recipients", "destination": "destinations"}
NAME_FIELDS = {"source": "name", "model": "model_name", "recipient": "name", "destination": "name"}
_ADAPTERS = {"source": TypeAdapter(SourceConfig), "model": TypeAdapter(ModelConfig),
             "recipient": TypeAdapter(RecipientConfig), "destination": TypeAdapter(DestinationConfig)}
#: the namespace of the ids given to the file's entries (stable: derived from kind and name)
_FILE_IDS = uuid.UUID("5d0c2a52-3f37-4c59-9a51-6c1f5c4c1e0b")
#: one writer at a time checks a change against everything else (a PostgreSQL advisory lock key)
_WRITE_LOCK = 0x74705F73746F7265  # "tp_store"


class NotFound(LookupError):
    """No entry of this kind with this id or name."""


class Conflict(Exception):
    """The change cannot be made as asked (a name taken, an entry of the file, one still in use)."""

    def __init__(self, message: str, fix: str = "", problems: list[Problem] | None = None) -> None:
        self.fix = fix
        self.problems = problems or []
        super().__init__(message)


@dataclass(frozen=True)
class Resource:
    id: str
    kind: str
    name: str
    document: dict[str, Any]  # as stored: secrets encrypted (mask before showing)
    origin: str  # "store" or "file"
    created_at: datetime | None = None
    updated_at: datetime | None = None

    def shown(self) -> dict[str, Any]:
        """What the API returns: the document with its secrets masked, its id and origin."""
        return {"id": self.id, **mask_secrets(self.document), "origin": self.origin,
                "created_at": self.created_at.isoformat() if self.created_at else None,
                "updated_at": self.updated_at.isoformat() if self.updated_at else None}


def store_settings(raw: dict[str, Any], source: str | None = None) -> StoreSettings | None:
    if raw.get("store") is None:
        return None
    try:
        return StoreSettings.model_validate(raw["store"])
    except ValidationError as exc:
        raise ConfigError(problems_from_validation(exc, ("store",)), source=source) from None


def _changed_now() -> dict[str, Any]:
    """A change's times: the clock when the statement runs, under the write lock (``now()`` is the
    transaction's start, which may precede a change another writer committed while this one
    waited for the lock; the store's version, the entries' count and latest change, would then
    miss this one)."""
    return {"created_at": sa.func.clock_timestamp(), "updated_at": sa.func.clock_timestamp()}


def store_version(conn: sa.Connection) -> tuple[int, str | None]:
    """What changes whenever an entry is created, changed or deleted: their count and latest change."""
    count, latest = conn.execute(sa.select(sa.func.count(), sa.func.max(resources.c.updated_at))).one()
    return count, latest.isoformat() if latest else None


def _rows(conn: sa.Connection) -> list[sa.Row]:
    return list(conn.execute(sa.select(resources).order_by(resources.c.created_at, resources.c.name)))


def _read(settings: StoreSettings, read):  # read: Connection -> T
    connection = settings.connection
    try:
        with engine_for(connection).connect() as conn:
            return read(conn)
    except sa.exc.OperationalError as exc:
        raise ConnectionFailure(f"the store's database {connection.database}", host=connection.host,
                                port=connection.port, reason=str(exc.orig).strip().splitlines()[0],
                                fix="check store.connection in the configuration file") from None
    except sa.exc.ProgrammingError as exc:
        raise ConfigError([Problem("store", f"the store cannot be read: {str(exc.orig).strip().splitlines()[0]}",
                                   "run `transfer-platform store migrate` (creates or upgrades its tables)")]) from None


def merge_stored(raw: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """The file's configuration with the store's entries after the file's own."""
    settings = store_settings(raw, source)
    rows = _read(settings, _rows)
    merged = dict(raw)
    for kind in KINDS:
        merged[LISTS[kind]] = list(raw.get(LISTS[kind]) or []) + [r.document for r in rows if r.kind == kind]
    return merged


#: the actors that are the recipient, not the provider: a magic link, a recipient's scoped auth token
RECIPIENT_ACTORS = ("magic_link:", "scoped_token:")


def _linked(conn: sa.Connection) -> set[str]:
    """The destinations a recipient entered, through a magic link or its scoped auth token's form
    (under the address policy by default)."""
    through_links = conn.execute(sa.select(magic_links.c.destination_name)
                                 .where(magic_links.c.destination_name.is_not(None))).scalars()
    through_tokens = conn.execute(sa.select(sa.func.jsonb_array_elements_text(scoped_tokens.c.options["destinations"]))
                                  .where(scoped_tokens.c.options.has_key("destinations"))).scalars()
    return {*through_links, *through_tokens}


def linked_destinations(raw: dict[str, Any], source: str | None = None) -> set[str]:
    """The names of the store's destinations a recipient entered (a magic link, a scoped token)."""
    return _read(store_settings(raw, source), _linked)


def file_id(kind: str, name: str) -> str:
    return str(uuid.uuid5(_FILE_IDS, f"{kind}:{name}"))


def validate_entry(kind: str, document: Any) -> dict[str, Any]:
    """One entry checked by the file's model (a plain secret is encrypted here); returns the
    document to store. Raises :class:`ConfigError` naming each field (``destination.port``)."""
    if not isinstance(document, dict):
        raise ConfigError([Problem(kind, "expected an object", f"send {{\"{kind}\": {{...}}}}")])
    try:
        entry = _ADAPTERS[kind].validate_python(document, context={PLAIN_SECRETS: True})
    except ValidationError as exc:
        raise ConfigError(problems_from_validation(exc, (kind,))) from None
    return entry.model_dump(mode="json", by_alias=True, exclude_unset=True)


def merge_patch(document: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch; a masked secret sent back as it was shown (``***``) is kept."""
    result = dict(document)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif value == "***" and isinstance(result.get(key), dict) and set(result[key]) == {"encrypted"}:
            continue
        elif isinstance(value, dict) and isinstance(result.get(key), dict) and set(result[key]) != {"encrypted"}:
            result[key] = merge_patch(result[key], value)
        else:
            result[key] = value
    return result


def _parsed(merged: dict[str, Any], *, base_dir: Path, source: str) -> PlatformConfig:
    """:func:`parse_config` of the file's and the store's entries merged; a problem names an entry
    by its name (``recipients.acme``), not by its position in the merged lists, which a client of
    the API never sees."""
    try:
        return parse_config(merged, base_dir=base_dir, source=source)
    except ConfigError as exc:
        names = {LISTS[kind]: [str(entry.get(NAME_FIELDS[kind])) if isinstance(entry, dict)
                               else str(getattr(entry, NAME_FIELDS[kind], "")) for entry in merged.get(LISTS[kind]) or []]
                 for kind in KINDS}
        raise ConfigError([Problem(entries_by_name(p.path, names), entries_by_name(p.message, names), p.fix)
                           for p in exc.problems], source=exc.source) from None


class ResourceStore:
    """The configuration file's and the store's entries, for the API."""

    def __init__(self, config_path: str | Path | None = None) -> None:
        self.path, self.file_raw = read_file(config_path)
        settings = store_settings(self.file_raw, str(self.path))
        if settings is None:
            raise ConfigError([Problem("store", "the configuration file has no store",
                                       "add a store: section (a PostgreSQL connection) to the file; "
                                       "see docs/api.md")], source=str(self.path))
        self.settings = settings
        self.engine = engine_for(settings.connection)
        #: the store's version and entries at the last check (see :meth:`_snapshot`)
        self._known: tuple[tuple, list[tuple[str, str, Any]]] | None = None
        #: the file's entries as validated by the last check, by kind
        self._file_entries: dict[str, list[Any]] = {}

    # -- reading --------------------------------------------------------------------------------

    def _file_resources(self, kind: str) -> list[Resource]:
        field = NAME_FIELDS[kind]
        return [Resource(id=file_id(kind, str(doc.get(field))), kind=kind, name=str(doc.get(field)),
                         document=doc, origin="file")
                for doc in self.file_raw.get(LISTS[kind]) or [] if isinstance(doc, dict)]

    @staticmethod
    def _resource(row: sa.Row) -> Resource:
        return Resource(id=row.id, kind=row.kind, name=row.name, document=row.document, origin="store",
                        created_at=row.created_at, updated_at=row.updated_at)

    def list(self, kind: str) -> list[Resource]:
        stored = _read(self.settings, lambda conn: list(conn.execute(
            sa.select(resources).where(resources.c.kind == kind).order_by(resources.c.created_at, resources.c.name))))
        return self._file_resources(kind) + [self._resource(r) for r in stored]

    def get(self, kind: str, key: str) -> Resource:
        """By id or by name."""
        for resource in self._file_resources(kind):
            if key in (resource.id, resource.name):
                return resource
        condition = resources.c.name == key
        with contextlib.suppress(ValueError):
            condition = sa.or_(condition, resources.c.id == str(uuid.UUID(key)))
        row = _read(self.settings, lambda conn: conn.execute(
            sa.select(resources).where(resources.c.kind == kind, condition)).first())
        if row is None:
            raise NotFound(f"no {kind} with id or name {key!r}")
        return self._resource(row)

    def config(self) -> PlatformConfig:
        """The platform's configuration: the file's entries and the store's, validated."""
        from transfer_platform.network.addresses import apply_policy

        config = _parsed(merge_stored(self.file_raw, str(self.path)), base_dir=self.path.parent,
                         source=str(self.path))
        apply_policy(config, _read(self.settings, _linked))
        return config

    # -- writing --------------------------------------------------------------------------------

    def candidate_config(self, kind: str, document: dict[str, Any], *, linked: bool = False) -> PlatformConfig:
        """The platform's configuration as it would be with ``document`` added (or in place of
        the entry of its name): what ``POST /test-destination`` tests, nothing saved. ``linked``:
        entered through a magic link (under the address policy)."""
        name = document[NAME_FIELDS[kind]]
        return _read(self.settings, lambda conn: self._policed(conn, kind, name, self._check_all(
            conn, kind, name, document)[0], linked=linked))

    @staticmethod
    def _policed(conn: sa.Connection, kind: str, name: str, config: PlatformConfig, *, linked: bool) -> PlatformConfig:
        """``config`` with each destination's address policy; a destination ``name`` under it is
        checked now (its addresses resolved, nothing connected): ``ConfigError`` if refused."""
        from transfer_platform.network.addresses import apply_policy, guard

        apply_policy(config, _linked(conn) | ({name} if linked and kind == "destination" else set()))
        if kind == "destination":
            guard(config.destination(name), "destination")
        return config

    def _snapshot(self, conn: sa.Connection) -> list[tuple[str, str, Any]]:
        """The store's entries, ``(kind, name, entry)`` in the order the configuration lists them;
        an entry is its document, or the model it was validated into by an earlier check. Read
        again only when the store's version changed (another writer, another process)."""
        version = store_version(conn)
        known = self._known
        if known is None or known[0] != version:
            known = (version, [(r.kind, r.name, r.document) for r in _rows(conn)])
            self._known = known
        return known[1]

    def _check_all(self, conn: sa.Connection, kind: str, name: str,
                   document: dict[str, Any] | None) -> tuple[PlatformConfig, list[tuple[str, str, Any]]]:
        """Validate the whole configuration as it would be with ``document`` as ``kind`` ``name``
        (``None``: without it); raises :class:`ConfigError` as ``validate`` would. Returns it, and
        the store's entries as they would be (validated: the next check reuses them, so a check
        costs what the new entry and the cross-checks cost, not a validation of every entry)."""
        entries: list[tuple[str, str, Any]] = []
        placed = False
        for each, each_name, entry in self._snapshot(conn):
            if (each, each_name) != (kind, name):
                entries.append((each, each_name, entry))
            elif document is not None:
                entries.append((kind, name, document))  # an update keeps its place
                placed = True
        if document is not None and not placed:
            entries.append((kind, name, document))
        merged = dict(self.file_raw)
        for each in KINDS:
            merged[LISTS[each]] = [*self._file_entries.get(each, self.file_raw.get(LISTS[each]) or []),
                                   *(entry for entry_kind, _, entry in entries if entry_kind == each)]
        config = _parsed(merged, base_dir=self.path.parent, source="the store")
        validated = {each: list(getattr(config, LISTS[each])) for each in KINDS}
        at = {each: len(self.file_raw.get(LISTS[each]) or []) for each in KINDS}
        self._file_entries = {each: validated[each][:at[each]] for each in KINDS}
        checked = []
        for each, each_name, _ in entries:
            checked.append((each, each_name, validated[each][at[each]]))
            at[each] += 1
        return config, checked

    def _write(self, change):  # change: Connection -> (result, the store's entries after it, or None)
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_WRITE_LOCK)))
                result, entries = change(conn)
                after = None if entries is None else (store_version(conn), entries)  # under the lock
            if after is not None:
                self._known = after  # committed
            return result
        except sa.exc.OperationalError as exc:
            connection = self.settings.connection
            raise ConnectionFailure(f"the store's database {connection.database}", host=connection.host,
                                    port=connection.port, reason=str(exc.orig).strip().splitlines()[0]) from None

    def from_prequel(self, kind: str, body: Any, vendor: str | None = None) -> Any:
        """``body`` with Prequel's ids and shapes as ours (:func:`prequel.to_ours`)."""
        return prequel.to_ours(kind, body, self._name_of, vendor)

    def _name_of(self, kind: str, key: str) -> str | None:
        try:
            return self.get(kind, key).name
        except NotFound:
            return None

    def ids(self, *kinds: str) -> dict[tuple[str, str], str]:
        """``{(kind, name): id}`` of every entry of ``kinds``."""
        return {(kind, r.name): r.id for kind in kinds for r in self.list(kind)}

    def create(self, kind: str, body: Any, *, actor: str) -> Resource:
        document = validate_entry(kind, self.from_prequel(kind, body))
        name = document[NAME_FIELDS[kind]]

        def change(conn: sa.Connection) -> tuple[Resource, list]:
            if any(r.name == name for r in self._file_resources(kind)) or conn.execute(
                    sa.select(resources.c.id).where(resources.c.kind == kind, resources.c.name == name)).first():
                raise Conflict(f"a {kind} named {name!r} exists", "choose another name, or update that one")
            config, entries = self._check_all(conn, kind, name, document)
            linked = actor.startswith(RECIPIENT_ACTORS)
            self._policed(conn, kind, name, config, linked=linked)
            if linked and kind == "destination":  # known as the recipient's from its first commit
                if actor.startswith("magic_link:"):
                    conn.execute(sa.update(magic_links).where(magic_links.c.id == actor.removeprefix("magic_link:"))
                                 .values(destination_name=name))
                else:
                    token = scoped_tokens.c.options
                    conn.execute(sa.update(scoped_tokens).where(scoped_tokens.c.id == actor.removeprefix("scoped_token:"))
                                 .values(options=token.op("||")(sa.func.jsonb_build_object(
                                     "destinations", sa.func.coalesce(token["destinations"], sa.text("'[]'::jsonb"))
                                     .op("||")(sa.func.jsonb_build_array(name))))))
            row = conn.execute(sa.insert(resources).values(id=str(uuid.uuid4()), kind=kind, name=name,
                                                           document=document, **_changed_now())
                               .returning(resources)).one()
            audit.record(conn, actor=actor, action="create", resource_type=kind, resource_id=row.id,
                         resource_name=name, changes=audit.changes(None, document))
            events.emit(conn, f"{kind}.created", {kind: {"id": row.id, "name": name}, "actor": actor})
            return self._resource(row), entries

        return self._write(change)

    def _stored(self, kind: str, key: str, verb: str) -> Resource:
        resource = self.get(kind, key)
        if resource.origin == "file":
            raise Conflict(f"{kind} {resource.name!r} is defined in the configuration file {self.path}",
                           f"{verb} it by editing the file (or import the file into the store: "
                           "`transfer-platform store import`, then remove it from the file)")
        return resource

    def update(self, kind: str, key: str, patch: Any, *, actor: str) -> Resource:
        if not isinstance(patch, dict):
            raise ConfigError([Problem(kind, "expected an object", f"send {{\"{kind}\": {{...}}}}")])
        current = self._stored(kind, key, "change")
        patch = self.from_prequel(kind, patch, current.document.get("vendor"))
        field = NAME_FIELDS[kind]
        if field in patch and patch[field] != current.name:
            raise Conflict(f"a {kind}'s name cannot be changed (its tables and state are kept under it)",
                           f"create a new {kind} and delete this one")
        document = validate_entry(kind, merge_patch(current.document, patch))
        action = "update"
        if kind == "destination" and set(patch) == {"is_enabled"}:
            action = "enable" if document.get("is_enabled", True) else "pause"  # the log's words for it

        def change(conn: sa.Connection) -> tuple[Resource, list]:
            config, entries = self._check_all(conn, kind, current.name, document)
            self._policed(conn, kind, current.name, config, linked=actor.startswith("magic_link:"))
            row = conn.execute(sa.update(resources).where(resources.c.id == current.id)
                               .values(document=document, updated_at=sa.func.clock_timestamp())
                               .returning(resources)).one()
            audit.record(conn, actor=actor, action=action, resource_type=kind, resource_id=current.id,
                         resource_name=current.name, changes=audit.changes(current.document, document))
            events.emit(conn, f"{kind}.updated", {kind: {"id": current.id, "name": current.name}, "actor": actor})
            return self._resource(row), entries

        return self._write(change)

    def delete(self, kind: str, key: str, *, actor: str) -> Resource:
        current = self._stored(kind, key, "delete")

        def change(conn: sa.Connection) -> tuple[Resource, list]:
            try:
                _, entries = self._check_all(conn, kind, current.name, None)
            except ConfigError as exc:
                raise Conflict(f"{kind} {current.name!r} is still in use", "delete or change what uses it first",
                               exc.problems) from None
            conn.execute(sa.delete(resources).where(resources.c.id == current.id))
            audit.record(conn, actor=actor, action="delete", resource_type=kind, resource_id=current.id,
                         resource_name=current.name, changes=audit.changes(current.document, None))
            events.emit(conn, f"{kind}.deleted", {kind: {"id": current.id, "name": current.name}, "actor": actor})
            return current, entries

        return self._write(change)

    def import_file(self, *, actor: str = "cli") -> dict[str, int]:
        """Copy the file's entries into the store (those not there yet); returns counts per kind.
        Afterwards remove them from the file: an entry in both is refused as a repeated name."""
        counts = {}

        def change(conn: sa.Connection) -> tuple[dict[str, int], None]:
            existing = {(r.kind, r.name) for r in _rows(conn)}
            for kind in KINDS:
                counts[kind] = 0
                for resource in self._file_resources(kind):
                    if (kind, resource.name) in existing:
                        continue
                    document = validate_entry(kind, resource.document)
                    conn.execute(sa.insert(resources).values(id=resource.id, kind=kind, name=resource.name,
                                                             document=document, **_changed_now()))
                    audit.record(conn, actor=actor, action="import", resource_type=kind, resource_id=resource.id,
                                 resource_name=resource.name, changes=audit.changes(None, document))
                    counts[kind] += 1
            return counts, None  # the next check reads the store again

        return self._write(change)

