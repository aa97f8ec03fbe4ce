"""Prequel's field names and shapes (its API version 2023-12-01) beside ours.

A client written for Prequel sends ids where we take names (``recipient_id`` for ``recipient``,
``source_id`` for ``source_name``) and nests a destination's connection under its vendor, with the
credentials under the chosen ``auth_method``::

    {"vendor": "postgres", "postgres": {"host": ..., "port": ..., "database": ..., "schema": ...,
                                        "auth_method": "password_auth",
                                        "password_auth": {"username": ..., "password": ...}}}

:func:`to_ours` turns such a body into ours (the file's shape, which the configuration's models
validate); :func:`beside_ours` adds Prequel's names and shape to an entry the API returns. Pure:
the store's lookups are passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from transfer_platform.errors import ConfigError, Problem

#: per kind: Prequel's id field -> (our field, the kind the id names)
ID_FIELDS: dict[str, dict[str, tuple[str, str]]] = {
    "destination": {"recipient_id": ("recipient", "recipient")},
    "model": {"source_id": ("source_name", "source")},
    "recipient": {},
    "source": {},
}
#: the auth method Prequel names for a user name and a password
PASSWORD_AUTH = "password_auth"


def to_ours(kind: str, body: Any, name_of: Callable[[str, str], str | None], vendor: str | None = None) -> Any:
    """``body`` (an entry, or a patch of one) with Prequel's names and shapes turned into ours.

    ``name_of(kind, id_or_name)``: the name of that entry, None when there is none. ``vendor``:
    the stored entry's vendor (a patch may not repeat it). Anything else is left as it is, for the
    configuration's models to judge. Raises :class:`ConfigError` naming the field."""
    if not isinstance(body, dict):
        return body
    document = dict(body)
    problems: list[Problem] = []
    for prequel_field, (ours, named_kind) in ID_FIELDS.get(kind, {}).items():
        if prequel_field not in document:
            continue
        given = document.pop(prequel_field)
        name = name_of(named_kind, given) if isinstance(given, str) and given else None
        if name is None:
            problems.append(Problem(f"{kind}.{prequel_field}", f"no {named_kind} with id {given!r}",
                                    f"use the id that POST /{named_kind}s answered (GET /{named_kind}s lists them)"))
        elif ours in document and document[ours] != name:
            problems.append(Problem(f"{kind}.{prequel_field}", f"names {named_kind} {name!r} but {ours} says "
                                    f"{document[ours]!r}", f"send one of {prequel_field} and {ours}"))
        else:
            document[ours] = name
    vendor = document.get("vendor") if isinstance(document.get("vendor"), str) else vendor
    if kind in ("destination", "source") and vendor and isinstance(document.get(vendor), dict):
        nested = document.pop(vendor)
        if "connection" in document:
            problems.append(Problem(f"{kind}.{vendor}", "the connection is given twice (connection and "
                                    f"{vendor})", f"send one of connection and {vendor}"))
        else:
            document["connection"] = _flat_connection(kind, vendor, nested, problems)
    if problems:
        raise ConfigError(problems)
    return document


def _flat_connection(kind: str, vendor: str, nested: dict[str, Any], problems: list[Problem]) -> dict[str, Any]:
    """Prequel's vendor-nested connection as ours: the chosen auth method's fields beside the rest."""
    connection = {k: v for k, v in nested.items() if k != "auth_method"}
    method = nested.get("auth_method")
    if method is None and isinstance(nested.get(PASSWORD_AUTH), dict):
        method = PASSWORD_AUTH  # a patch may change the credentials alone
    if method is None:
        return connection
    credentials = connection.pop(method, None) if isinstance(method, str) else None
    if not isinstance(credentials, dict):
        problems.append(Problem(f"{kind}.{vendor}.{method if isinstance(method, str) else 'auth_method'}",
                                f"auth_method is {method!r} but no {method!r} object holds its credentials",
                                f'send "auth_method": "{PASSWORD_AUTH}", "{PASSWORD_AUTH}": '
                                '{"username": ..., "password": ...}'))
        return connection
    for key, value in credentials.items():
        if key in connection and connection[key] != value:
            problems.append(Problem(f"{kind}.{vendor}.{method}.{key}", f"{key} is given twice, differently",
                                    f"send {key} once, inside {method}"))
        connection[key] = value
    return connection


def beside_ours(kind: str, shown: dict[str, Any], ids: Mapping[tuple[str, str], str]) -> dict[str, Any]:
    """An entry as the API returns it (``shown``), with Prequel's names added beside ours: the ids
    of the entries it names (``ids[(kind, name)]``) and, for a destination or source, its
    connection nested under its vendor (credentials under ``password_auth``)."""
    result = dict(shown)
    for prequel_field, (ours, named_kind) in ID_FIELDS.get(kind, {}).items():
        if ours in shown:
            result[prequel_field] = ids.get((named_kind, shown[ours]))
    nested_under, connection = shown.get("vendor"), shown.get("connection")  # the vendor's name: a key here
    if kind in ("destination", "source") and isinstance(nested_under, str) and isinstance(connection, dict) \
            and nested_under not in shown:
        result[nested_under] = nested_connection(connection)
    return result


def nested_connection(connection: dict[str, Any]) -> dict[str, Any]:
    """Our connection in Prequel's shape: a user name and password under ``password_auth``."""
    if "username" not in connection:
        return dict(connection)
    rest = {k: v for k, v in connection.items() if k not in ("username", "password")}
    credentials = {k: connection[k] for k in ("username", "password") if k in connection}
    return {**rest, "auth_method": PASSWORD_AUTH, PASSWORD_AUTH: credentials}
