"""The slices of a relayed window (``sources/relay.py``): together they cover the window once, the
first also takes NULL last-modified values (refused by the staging scan), each value is cast to
the staging column's type."""

from __future__ import annotations

from datetime import UTC, date, datetime

from transfer_platform.sources.relay import RelayRead, split_bounds


def relay(bounds: tuple[str, ...]) -> RelayRead:
    return RelayRead(source={}, search_path=None, window_sql="SELECT 1", columns=(("Id", "id"), ("lm", "lm")),
                     last_modified="lm", bounds=bounds, read_timeout=60)


def test_the_slices_cover_the_window_once_and_the_first_takes_nulls():
    three = relay(("'a'", "'b'"))
    sql = [three.copy_out(i, {"id": "bigint", "lm": "timestamp with time zone"}) for i in range(3)]
    assert 'SELECT "Id"::bigint AS "id", "lm"::timestamp with time zone AS "lm" FROM (SELECT 1)' in sql[0]
    assert sql[0].endswith("""WHERE ("lm" < 'a' OR "lm" IS NULL)) TO STDOUT (FORMAT binary)""")
    assert sql[1].endswith("""WHERE "lm" >= 'a' AND "lm" < 'b') TO STDOUT (FORMAT binary)""")
    assert sql[2].endswith("""WHERE "lm" >= 'b') TO STDOUT (FORMAT binary)""")
    assert "WHERE" not in relay(()).copy_out(0, {"id": "bigint", "lm": "date"})  # one slice: the window


def test_bounds_split_evenly_and_never_repeat():
    start, end = datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 1, 5, tzinfo=UTC)
    assert split_bounds(start, end, 4) == [datetime(2025, 1, d, tzinfo=UTC) for d in (2, 3, 4)]
    assert split_bounds(date(2025, 1, 1), date(2025, 1, 3), 4) == [date(2025, 1, 2)]
    assert split_bounds(0, 10, 2) == [5]
    assert split_bounds(0, 10, 1) == []
