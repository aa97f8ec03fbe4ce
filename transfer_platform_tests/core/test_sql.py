"""SQL text: literals and identifiers that cannot be broken out of, predicates, the upsert."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transfer_platform.core.sql import (
    change_predicate,
    derived_table,
    plan_soft_delete,
    plan_upsert,
    qualified,
    quote_ident,
    quote_literal,
    search_path_value,
    source_select,
    tenant_predicate,
    timestamp_literal,
    wrap_source_query,
)
from transfer_platform.vendors.mysql import SQL_TEXT as MYSQL
from transfer_platform.vendors.postgres import SQL_TEXT as POSTGRES


def read_literal(sql: str, dialect: str) -> tuple[str, str]:
    """Lex one string literal at the start of ``sql`` as the server would (backslash escapes on).

    Returns the value and whatever text follows the literal.
    """
    if dialect is MYSQL:
        return read_mysql_hex_literal(sql)
    prefix = "E'"
    assert sql.startswith(prefix)
    i, out = len(prefix), []
    while i < len(sql):
        ch = sql[i]
        if ch == "\\":
            out.append(sql[i + 1])
            i += 2
        elif ch == "'":
            if sql[i + 1: i + 2] == "'":
                out.append("'")
                i += 2
            else:
                return "".join(out), sql[i + 1:]
        else:
            out.append(ch)
            i += 1
    raise AssertionError(f"unterminated literal: {sql!r}")


def read_mysql_hex_literal(sql: str) -> tuple[str, str]:
    """Lex ``_utf8mb4 X'<hex digits>'`` as MySQL does: only hex digits may stand between the quotes."""
    prefix = "_utf8mb4 X'"
    assert sql.startswith(prefix)
    end = sql.index("'", len(prefix))
    digits = sql[len(prefix):end]
    assert all(c in "0123456789ABCDEF" for c in digits), digits
    assert len(digits) % 2 == 0
    return bytes.fromhex(digits).decode(), sql[end + 1:]


def read_ident(sql: str, quote: str) -> tuple[str, str]:
    assert sql.startswith(quote)
    i, out = 1, []
    while i < len(sql):
        if sql[i] == quote:
            if sql[i + 1: i + 2] == quote:
                out.append(quote)
                i += 2
                continue
            return "".join(out), sql[i + 1:]
        out.append(sql[i])
        i += 1
    raise AssertionError(f"unterminated identifier: {sql!r}")


# -- quote_literal -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "postgres", "mysql"),
    [
        ("acme", "E'acme'", "_utf8mb4 X'61636D65'"),
        ("O'Brien", "E'O''Brien'", "_utf8mb4 X'4F27427269656E'"),
        ("a\\'b", "E'a\\\\''b'", "_utf8mb4 X'615C2762'"),
        ("'; DROP TABLE x; --", "E'''; DROP TABLE x; --'",
         "_utf8mb4 X'273B2044524F50205441424C4520783B202D2D'"),
        ("trailing\\", "E'trailing\\\\'", "_utf8mb4 X'747261696C696E675C'"),
        ("é", "E'é'", "_utf8mb4 X'C3A9'"),
        ("", "E''", "_utf8mb4 X''"),
    ],
    ids=["plain", "O'Brien", "backslash-quote", "injection", "trailing-backslash", "utf-8", "empty"],
)
def test_quote_literal(value, postgres, mysql):
    assert quote_literal(value) == postgres
    assert quote_literal(value, MYSQL) == mysql
    for dialect, text in ((POSTGRES, postgres), (MYSQL, mysql)):
        decoded, rest = read_literal(text, dialect)
        assert decoded == value
        assert rest == ""


@pytest.mark.parametrize("dialect", [POSTGRES, MYSQL], ids=["postgres", "mysql"])
def test_quote_literal_refuses_nul(dialect):
    with pytest.raises(ValueError, match="NUL"):
        quote_literal("acme\x00", dialect)


@pytest.mark.parametrize("dialect", [POSTGRES, MYSQL], ids=["postgres", "mysql"])
def test_quote_literal_refuses_a_lone_surrogate(dialect):
    with pytest.raises(ValueError, match="lone surrogate"):
        quote_literal("acme\ud800", dialect)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))),
       st.sampled_from([POSTGRES, MYSQL]))
def test_quote_literal_cannot_be_broken_out_of(value, dialect):
    decoded, rest = read_literal(quote_literal(value, dialect), dialect)
    assert decoded == value
    assert rest == ""


def test_tenant_predicate_quotes_both_sides():
    assert tenant_predicate("org id", "O'Brien") == "\"org id\" = E'O''Brien'"
    assert tenant_predicate("org", "x", MYSQL) == "`org` = _utf8mb4 X'78'"
    assert tenant_predicate("o`rg", "x", MYSQL) == "`o``rg` = _utf8mb4 X'78'"


# -- quote_ident -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "postgres", "mysql"),
    [
        ("orders", '"orders"', "`orders`"),
        ('we"ird', '"we""ird"', '`we"ird`'),
        ("back`tick", '"back`tick"', "`back``tick`"),
        ("Mixed Case", '"Mixed Case"', "`Mixed Case`"),
    ],
    ids=["plain", "double-quote", "backtick", "space-and-case"],
)
def test_quote_ident(name, postgres, mysql):
    assert quote_ident(name) == postgres
    assert quote_ident(name, MYSQL) == mysql


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="\x00"), min_size=1),
       st.sampled_from([(POSTGRES, '"'), (MYSQL, "`")]))
def test_quote_ident_cannot_be_broken_out_of(name, dialect_quote):
    dialect, quote = dialect_quote
    decoded, rest = read_ident(quote_ident(name, dialect), quote)
    assert decoded == name
    assert rest == ""


def test_quote_ident_refuses_nul():
    with pytest.raises(ValueError, match="NUL"):
        quote_ident("a\x00b")


def test_qualified_skips_missing_parts():
    assert qualified("public", "orders") == '"public"."orders"'
    assert qualified(None, "orders") == '"orders"'
    assert qualified("db", "t", dialect=MYSQL) == "`db`.`t`"


# -- timestamp_literal and change_predicate ----------------------------------------------------


@pytest.mark.parametrize(
    ("moment", "postgres", "mysql"),
    [
        (datetime(2024, 1, 2, 3, 4, 5, 123_456, tzinfo=UTC),
         "'2024-01-02 03:04:05.123456+00'", "TIMESTAMP'2024-01-02 03:04:05.123456'"),
        (datetime(2024, 1, 2, 3, 4, 5, 1, tzinfo=UTC),
         "'2024-01-02 03:04:05.000001+00'", "TIMESTAMP'2024-01-02 03:04:05.000001'"),
        (datetime(1970, 1, 1, tzinfo=UTC),
         "'1970-01-01 00:00:00.000000+00'", "TIMESTAMP'1970-01-01 00:00:00.000000'"),
        (datetime(2024, 1, 2, 5, 0, 0, 10, tzinfo=timezone(timedelta(hours=2))),
         "'2024-01-02 03:00:00.000010+00'", "TIMESTAMP'2024-01-02 03:00:00.000010'"),
    ],
    ids=["microseconds", "one-microsecond", "epoch", "converted-to-utc"],
)
def test_timestamp_literal(moment, postgres, mysql):
    assert timestamp_literal(moment) == postgres
    assert timestamp_literal(moment, MYSQL) == mysql


def test_postgres_timestamp_literal_is_untyped():
    """A typed TIMESTAMPTZ literal would make PostgreSQL cast a ``timestamp`` column (no index)."""
    text = timestamp_literal(datetime(2024, 1, 1, tzinfo=UTC))
    assert text == "'2024-01-01 00:00:00.000000+00'"


def test_change_predicate():
    lower = datetime(2024, 1, 1, 0, 0, 0, 250_000, tzinfo=UTC)
    upper = datetime(2024, 1, 1, 1, tzinfo=UTC)
    text = change_predicate("updated_at", lower, upper)
    assert text == (
        "((\"updated_at\" >= '2024-01-01 00:00:00.250000+00' "
        "AND \"updated_at\" < '2024-01-01 01:00:00.000000+00') "
        "OR \"updated_at\" IS NULL)"
    )
    assert '"updated_at" >= ' + timestamp_literal(lower) in text
    assert '"updated_at" < ' + timestamp_literal(upper) in text
    assert '"updated_at" IS NULL' in text


def test_change_predicate_mysql():
    text = change_predicate("lm", datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 2, tzinfo=UTC),
                            dialect=MYSQL)
    assert "`lm` >= TIMESTAMP'2024-01-01 00:00:00.000000'" in text
    assert "`lm` < TIMESTAMP'2024-01-02 00:00:00.000000'" in text
    assert "`lm` IS NULL" in text


# -- relations and the read query ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "expected"),
    [(POSTGRES, '(SELECT a FROM t WHERE x = 1) AS "tp_source_query"'),
     (MYSQL, "(SELECT a FROM t WHERE x = 1) AS `tp_source_query`")],
    ids=["postgres", "mysql"],
)
def test_wrap_source_query_is_a_derived_table(dialect, expected):
    assert wrap_source_query("  SELECT a FROM t WHERE x = 1 ;\n", dialect=dialect) == expected


def test_source_select_applies_the_predicates_outside_a_source_query():
    relation = wrap_source_query("SELECT id, lm FROM t WHERE lm > 0", dialect=MYSQL)
    sql = source_select(relation, ["id", "lm"], ["p1", "p2"], dialect=MYSQL)
    assert sql == ("SELECT `id`, `lm` FROM (SELECT id, lm FROM t WHERE lm > 0) "
                   "AS `tp_source_query` WHERE p1 AND p2")


def test_source_select_without_predicates():
    assert source_select('"t"', ["a"], []) == 'SELECT "a" FROM "t" WHERE TRUE'


def test_derived_table():
    assert derived_table("SELECT 1") == '(SELECT 1) AS "tp_batch"'
    assert derived_table("SELECT 1", "b", MYSQL) == "(SELECT 1) AS `b`"


@pytest.mark.parametrize(("schema", "expected"),
                         [("acme", '"acme"'), ("o'r\"x", '"o\'r""x"'), ("A,b", '"A,b"')],
                         ids=["plain", "quotes", "comma-and-case"])
def test_search_path_value_is_one_quoted_schema(schema, expected):
    assert search_path_value(schema) == expected


# -- plan_upsert -------------------------------------------------------------------------------


def test_plan_upsert():
    sql = plan_upsert(target='"public"."orders"', staging='"public"."orders_stage"',
                      columns=["id", "organization_id", "name", "updated_at"],
                      primary_key=["id"], last_modified="updated_at")
    assert sql.startswith(
        'INSERT INTO "public"."orders" AS t ("id", "organization_id", "name", "updated_at") '
        'SELECT "id", "organization_id", "name", "updated_at" FROM "public"."orders_stage" '
    )
    assert 'ON CONFLICT ("id") DO UPDATE SET ' in sql
    assert ('"organization_id" = EXCLUDED."organization_id", "name" = EXCLUDED."name", '
            '"updated_at" = EXCLUDED."updated_at"') in sql
    assert '"id" = EXCLUDED."id"' not in sql  # the key is never rewritten
    where = sql.split(" WHERE ", 1)[1]
    assert where == (
        'EXCLUDED."updated_at" > t."updated_at" OR (EXCLUDED."updated_at" = t."updated_at" AND '
        'ROW(t."organization_id", t."name") IS DISTINCT FROM '
        'ROW(EXCLUDED."organization_id", EXCLUDED."name"))'
    )


def test_plan_upsert_single_compared_column_is_still_a_row():
    sql = plan_upsert(target="t1", staging="s1", columns=["id", "v", "lm"], primary_key=["id"],
                      last_modified="lm")
    assert 'ROW(t."v") IS DISTINCT FROM ROW(EXCLUDED."v")' in sql


def test_plan_upsert_composite_key():
    sql = plan_upsert(target="t1", staging="s1", columns=["org", "id", "v", "lm"],
                      primary_key=["org", "id"], last_modified="lm")
    assert 'ON CONFLICT ("org", "id") DO UPDATE SET "v" = EXCLUDED."v", "lm" = EXCLUDED."lm" ' in sql


def test_plan_upsert_only_last_modified_updatable():
    sql = plan_upsert(target="t1", staging="s1", columns=["id", "lm"], primary_key=["id"],
                      last_modified="lm")
    assert sql.endswith('DO UPDATE SET "lm" = EXCLUDED."lm" WHERE EXCLUDED."lm" > t."lm"')
    assert "IS DISTINCT FROM" not in sql


def test_plan_upsert_nothing_to_update_does_nothing():
    sql = plan_upsert(target="t1", staging="s1", columns=["id", "lm"], primary_key=["id", "lm"],
                      last_modified="lm")
    assert sql == 'INSERT INTO t1 AS t ("id", "lm") SELECT "id", "lm" FROM s1 ON CONFLICT ("id", "lm") DO NOTHING'
    assert "DO UPDATE" not in sql


def test_plan_upsert_append_only_inserts_and_never_updates():
    sql = plan_upsert(target='"public"."events"', staging='"public"."events_stage"',
                      columns=["id", "organization_id", "payload", "updated_at"], primary_key=["id"],
                      last_modified="updated_at", append_only=True)
    assert sql == (
        'INSERT INTO "public"."events" AS t ("id", "organization_id", "payload", "updated_at") '
        'SELECT "id", "organization_id", "payload", "updated_at" FROM "public"."events_stage" '
        'ON CONFLICT ("id") DO NOTHING'
    )
    assert "DO UPDATE" not in sql


# -- soft deletes ---------------------------------------------------------------------------------


def test_plan_soft_delete_removes_only_rows_whose_delete_is_not_older():
    sql = plan_soft_delete(target='"d"."t"', staging='"d"."s"', primary_key=["id", "org"],
                           last_modified="lm", marker="is_deleted", marker_type="boolean")
    assert sql == ('DELETE FROM "d"."t" AS t USING "d"."s" AS s WHERE t."id" = s."id" AND t."org" = s."org" '
                   'AND s."is_deleted" IS TRUE AND s."lm" >= t."lm"')
    by_time = plan_soft_delete(target="t", staging="s", primary_key=["id"], last_modified="lm",
                               marker="deleted_at", marker_type="timestamp")
    assert 's."deleted_at" IS NOT NULL AND s."lm" >= t."lm"' in by_time


def test_plan_upsert_leaves_out_skipped_rows():
    sql = plan_upsert(target="t", staging="s", columns=["id", "lm", "v"], primary_key=["id"],
                      last_modified="lm", skip='"is_deleted" IS TRUE')
    assert 'SELECT "id", "lm", "v" FROM s WHERE NOT ("is_deleted" IS TRUE) ON CONFLICT' in sql
