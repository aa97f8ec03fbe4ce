"""SQL text planning: literals, identifiers, the source predicates and the staged upsert.

Functions here return text; running it is the job of ``sources/`` and ``destinations/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime

from transfer_platform.core.timeutil import utc


class SqlText:
    """How one SQL engine writes names and literals into the text planned here: the part of its
    dialect that its source reader, its destination writer and these planners share (each
    engine's is beside its record, ``transfer_platform/vendors/<vendor>.py``). These forms are
    PostgreSQL's, the planners' default; an engine that writes them otherwise overrides them.

    Identifiers are double-quoted (quotes doubled). A string is an ``E''`` literal with quotes
    and backslashes doubled, safe whatever ``standard_conforming_strings`` says. A timestamp is
    an untyped literal with an explicit ``+00`` offset: PostgreSQL gives it the type of the
    column it is compared with, so neither a ``timestamp`` nor a ``timestamptz`` column is cast
    (a cast column cannot use its index); a ``timestamp`` column ignores the offset and compares
    the UTC wall-clock time, which is how the platform reads such columns. A date is untyped
    too (it takes the column's type)."""

    identifier_quote = '"'

    def quote_ident(self, name: str) -> str:
        quote = self.identifier_quote
        return quote + name.replace(quote, quote + quote) + quote

    def string_literal(self, value: str) -> str:
        """``value`` (valid Unicode without NUL: :func:`quote_literal` checked) as a literal."""
        escaped = value.replace("\\", "\\\\").replace("'", "''")
        return f"E'{escaped}'"

    def timestamp_literal(self, text: str) -> str:
        """A UTC wall-clock time written ``YYYY-MM-DD HH:MM:SS.ffffff`` as a literal."""
        return f"'{text}+00'"

    def date_literal(self, day: date) -> str:
        return f"'{day.isoformat()}'"


#: the planners' default text: PostgreSQL's
STANDARD = SqlText()


def quote_ident(name: str, dialect: SqlText = STANDARD) -> str:
    """Quote an identifier as ``dialect`` does: ``"a""b"`` by default (MySQL: ```a``b```)."""
    if "\x00" in name:
        raise ValueError("identifiers cannot contain NUL characters")
    return dialect.quote_ident(name)


def qualified(*parts: str | None, dialect: SqlText = STANDARD) -> str:
    return ".".join(quote_ident(p, dialect) for p in parts if p)


def quote_literal(value: str, dialect: SqlText = STANDARD) -> str:
    """A string literal that selects exactly ``value``, quotes and backslashes included, as
    ``dialect`` writes it (:meth:`SqlText.string_literal`; MySQL: the UTF-8 bytes in hex)."""
    if "\x00" in value:
        raise ValueError("a tenant id or literal cannot contain a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"a tenant id or literal must be valid Unicode text; {value!r} holds a lone "
                         "surrogate (a broken escape such as \\ud800 in the configuration)") from None
    return dialect.string_literal(value)


def timestamp_literal(moment: datetime, dialect: SqlText = STANDARD) -> str:
    """A UTC timestamp literal with microseconds (the session time zone is pinned to UTC), as
    ``dialect`` writes it (:meth:`SqlText.timestamp_literal`)."""
    return dialect.timestamp_literal(utc(moment).strftime("%Y-%m-%d %H:%M:%S.%f"))


def change_literal(value: object, dialect: SqlText = STANDARD) -> str:
    """A last-modified bound as a literal of the column's own kind (so that its index is used):
    a timestamp (see :func:`timestamp_literal`), an epoch integer, a date, or text."""
    if isinstance(value, datetime):
        return timestamp_literal(value, dialect)
    if isinstance(value, bool):
        raise TypeError("a last-modified bound cannot be a boolean")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, date):
        return dialect.date_literal(value)
    if isinstance(value, str):
        return quote_literal(value, dialect)
    raise TypeError(f"a last-modified bound cannot be {type(value).__name__}")


def change_predicate(
    last_modified: str,
    lower: object,
    upper: object,
    *,
    dialect: SqlText = STANDARD,
) -> str:
    """``lower <= lm < upper``, or ``lm IS NULL`` so that NULLs are seen and refused, not dropped.

    ``lower`` and ``upper`` are values of the column's kind (``LastModified.bound``): datetimes
    for a timestamp column, integers for an epoch, dates, or text."""
    col = quote_ident(last_modified, dialect)
    return (
        f"(({col} >= {change_literal(lower, dialect)} AND {col} < {change_literal(upper, dialect)})"
        f" OR {col} IS NULL)"
    )


def tenant_predicate(organization_column: str, tenant_id: str, dialect: SqlText = STANDARD) -> str:
    return f"{quote_ident(organization_column, dialect)} = {quote_literal(tenant_id, dialect)}"


def source_select(
    relation_sql: str,
    columns: Sequence[str],
    predicates: Sequence[str],
    *,
    dialect: SqlText = STANDARD,
) -> str:
    """``SELECT cols FROM relation WHERE p1 AND p2``; a ``source_query`` comes in as a subquery."""
    cols = ", ".join(quote_ident(c, dialect) for c in columns)
    where = " AND ".join(predicates) if predicates else "TRUE"
    return f"SELECT {cols} FROM {relation_sql} WHERE {where}"


def wrap_source_query(query: str, alias: str = "tp_source_query", dialect: SqlText = STANDARD) -> str:
    """A custom ``source_query`` as a derived table: our predicates apply outside it."""
    body = query.strip().rstrip(";").strip()
    return f"({body}) AS {quote_ident(alias, dialect)}"


def derived_table(select_sql: str, alias: str = "tp_batch", dialect: SqlText = STANDARD) -> str:
    """A SELECT as the ``dbtable`` of a Spark JDBC read: ``(SELECT ...) AS alias``."""
    return f"({select_sql}) AS {quote_ident(alias, dialect)}"


def search_path_value(schema: str) -> str:
    """A PostgreSQL ``search_path`` holding exactly one schema, quoted as an identifier."""
    return quote_ident(schema)


def plan_upsert(
    *,
    target: str,
    staging: str,
    columns: Sequence[str],
    primary_key: Sequence[str],
    last_modified: str,
    append_only: bool = False,
    skip: str | None = None,
) -> str:
    """Merge a staging table into ``target`` on the primary key, in one statement.

    A row is replaced only by a newer one, or by an equally new one that differs (two updates in
    one second of a second-precision column must both land, yet re-reading the lookback overlap
    must not rewrite identical rows). ``append_only`` (a model's ``is_append_only``): rows are
    only inserted; a row whose key is already in ``target`` is skipped, never updated.
    ``skip``: a condition on the staging table's columns whose rows are left out (rows marked
    deleted, removed by :func:`plan_soft_delete` instead). ``target`` and ``staging`` are
    already-quoted names.
    """
    q = quote_ident
    cols = ", ".join(q(c) for c in columns)
    updatable = [c for c in columns if c not in primary_key]
    compared = [c for c in updatable if c != last_modified]
    lm = q(last_modified)
    newer = f"EXCLUDED.{lm} > t.{lm}"
    if compared:
        before = ", ".join(f"t.{q(c)}" for c in compared)
        after = ", ".join(f"EXCLUDED.{q(c)}" for c in compared)
        # ROW(...) so that a single compared column is still a row comparison
        condition = f"{newer} OR (EXCLUDED.{lm} = t.{lm} AND ROW({before}) IS DISTINCT FROM ROW({after}))"
    else:
        condition = newer
    conflict = ", ".join(q(c) for c in primary_key)
    source = f"{staging}" + (f" WHERE NOT ({skip})" if skip else "")
    if append_only or not updatable:
        return f"INSERT INTO {target} AS t ({cols}) SELECT {cols} FROM {source} ON CONFLICT ({conflict}) DO NOTHING"
    assignments = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in updatable)
    return (
        f"INSERT INTO {target} AS t ({cols}) SELECT {cols} FROM {source} "
        f"ON CONFLICT ({conflict}) DO UPDATE SET {assignments} "
        f"WHERE {condition}"
    )


def marked_deleted(column: str, data_type: str, alias: str | None = None) -> str:
    """The condition that a row is marked deleted: a boolean marker is true, a timestamp marker
    (``deleted_at``) is set."""
    ref = (f"{alias}." if alias else "") + quote_ident(column)
    return f"{ref} IS TRUE" if data_type == "boolean" else f"{ref} IS NOT NULL"


def plan_soft_delete(*, target: str, staging: str, primary_key: Sequence[str], last_modified: str,
                     marker: str, marker_type: str) -> str:
    """Remove from ``target`` the rows that the staging table marks deleted, unless the delivered
    row is newer than the delete (an older delete never removes a newer row; at the same
    last-modified value the delete wins: the row changed to deleted)."""
    q = quote_ident
    join = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in primary_key)
    return (f"DELETE FROM {target} AS t USING {staging} AS s WHERE {join} "
            f"AND {marked_deleted(marker, marker_type, 's')} AND s.{q(last_modified)} >= t.{q(last_modified)}")
