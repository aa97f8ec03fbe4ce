"""The contract every source keeps, whatever its vendor: one suite, parametrized by the vendor
registry (``transfer_platform.vendors.SOURCES``) through the test sources of ``support.sources``
(each variant, in each tenancy; a registered vendor without one fails the first test here).

What the reference says a read is (the seeds: change detection, windowed transfers, the cursor
of an incremental sync), checked on the reader's frames, the rows written by the source's own
tools and read by the least-privilege reader ``docs/permissions.md`` lists:

- only the tenant's rows come back, never another tenant's: not one whose id differs only in
  case, a trailing space, quotes written as SQL escapes them, or one a pattern (``LIKE``, a glob)
  would match; the tenant ids hold single and double quotes, a backslash, ``%`` and ``*``;
- a window reads ``lower <= last_modified < upper``: the next transfer's first read starts at the
  last delivered value minus the vendor's lookback (the seeds' table: PostgreSQL 30 s, MySQL 5 s,
  others 5 minutes), a row exactly at a lower bound is read, one exactly at an upper bound (the
  window's end, the run's "now") is not; a NULL last-modified value is read (the transfer then
  refuses it rather than lose the row);
- every data type of the model (``core/types.py``) comes back as its value: the widest decimal,
  timestamps in UTC, dates, booleans, 64-bit integers, unicode text, JSON, NULLs;
- ``check_read`` refuses a missing table, a missing column, a column its data type cannot read
  and a read the source refuses for a missing right, each naming what is wrong and the fix;
- a tenant without rows reads an empty frame of the model's columns, not an error.

Each read is checked as :meth:`read` gives it, counted (:meth:`count`) and, where windows matter,
as neighbouring windows read together (:meth:`read_together` then :meth:`tagged`, as a transfer
reads small windows; their counts, :meth:`window_rows`, never below what they read; and where a
database's own driver reads them without Spark, ``sources/direct.py``, the same rows).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform.core.planning import plan_windows, windowing_for
from transfer_platform.core.types import TYPES
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.destinations.base import arrow_schema
from transfer_platform.errors import ConfigError, TransferPlatformError
from transfer_platform.sources.base import WINDOW_COLUMN, ReadRequest, SourceReader, reader_for
from transfer_platform.vendors import SOURCES
from transfer_platform_tests.support import sources
from transfer_platform_tests.support.events import day, epoch
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.sources import ORGANIZATION_COLUMN, TestSource

MODEL, TABLE = "events", "events"
MIN_START = day(3, 1)
NOW = day(3, 4)
WHOLE = ReadBounds(MIN_START, NOW, Window(MIN_START, NOW))
#: the columns of most cases: the key, the last-modified value, the tenant's name in each row
COLUMNS = {"id": "integer", "updated_at": "timestamp", "payload": "string"}
#: the lookback of each vendor, as the reference's change-detection table gives it
REFERENCE_LOOKBACK = {"postgres": 30, "mysql": 5}
OTHER_VENDORS_LOOKBACK = 300


def test_every_registered_source_vendor_has_a_test_source() -> None:
    assert sources.missing_factories() == [], (
        "add a test source of each to transfer_platform_tests/support/sources.py (FACTORIES)")


# -- the source, the model, the reads ------------------------------------------------------------------


@pytest.fixture(params=sources.variants())
def source(request, tmp_path, monkeypatch) -> TestSource:
    variant, tenancy = request.param
    return sources.make(variant, tenancy, sources.new_place(request, tmp_path, monkeypatch))


@pytest.fixture(params=sources.variants(with_rights=True))
def source_with_rights(request, tmp_path, monkeypatch) -> TestSource:
    variant, tenancy = request.param
    return sources.make(variant, tenancy, sources.new_place(request, tmp_path, monkeypatch))


def configure(source: TestSource, source_table: str, columns: dict[str, str]) -> PlatformConfig:
    """One model of ``columns`` (``id`` its key, ``updated_at`` its last-modified column) read
    from ``source_table`` of ``source``."""
    model = {
        "model_name": MODEL,
        "source_name": "src",
        "source_table": source_table,
        "max_transfer_time_window_seconds": 86400,
        "min_start_time_epoch": epoch(MIN_START),
        "columns": [{"name_in_source": name, "data_type": data_type, "is_primary_key": name == "id",
                     "is_last_modified": name == "updated_at"} for name, data_type in columns.items()],
    }
    if source.multi_tenant:
        model["organization_column"] = ORGANIZATION_COLUMN
    return parse_config({
        "sources": [source.entry("src")],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": "rcpt"}],
        "destinations": [{"name": "dst", "vendor": "postgres", "recipient": "rcpt",
                          "connection": pg_connection_config("unused")}],
    }, now=NOW)


@dataclass(frozen=True)
class Reading:
    """A model of a test source, and its reader."""

    config: PlatformConfig
    reader: SourceReader

    def request(self, tenant: str, bounds: ReadBounds = WHOLE) -> ReadRequest:
        return ReadRequest(self.config.model(MODEL), tenant, bounds, "dst")

    def rows(self, spark, tenant: str, bounds: ReadBounds = WHOLE) -> list[dict]:
        """The rows :meth:`read` returns, as Arrow brings them into this process, by id."""
        table = self.reader.read(spark, self.request(tenant, bounds)).toArrow()
        return sorted(table.to_pylist(), key=lambda r: (r["id"] is None, r["id"]))

    def count(self, spark, tenant: str, bounds: ReadBounds = WHOLE) -> int:
        return self.reader.count(spark, self.request(tenant, bounds))

    def together(self, spark, tenant: str, windows: list[ReadBounds]) -> list[dict]:
        """The rows of ``windows`` read together and tagged, each with its window's index; where
        the source offers its own driver's read (``Route.DRIVER``: ``driver_reads``), it reads
        the same rows. Each window's count (``window_rows``), if the source tells it, is
        never below the rows it reads, and 0 only for a window that reads none."""
        requests = [self.request(tenant, bounds) for bounds in windows]
        rows = self.reader.tagged(self.reader.read_together(spark, requests).toArrow(), requests).to_pylist()
        direct = self.reader.driver_reads(requests[0])
        if direct is not None:
            straight = direct.read_together(requests, arrow_schema(self.config.model(MODEL))).to_pylist()
            assert by_window(straight) == by_window(rows), "the driver's direct read differs from Spark's"
        counts = self.reader.window_rows(spark, requests, 1000)
        if counts is not None:
            read = [sum(r[WINDOW_COLUMN] == i for r in rows) for i in range(len(requests))]
            assert all(n >= r and (n > 0 or r == 0) for n, r in zip(counts, read, strict=True)), (counts, read)
        return rows

    def check_read(self, spark, tenant: str) -> None:
        self.reader.check_read(spark, self.request(tenant))


def by_window(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r[WINDOW_COLUMN], r["id"]))


def reading(source: TestSource, rows: sources.Rows, columns: dict[str, str] = COLUMNS, *,
            model_columns: dict[str, str] | None = None) -> Reading:
    """``rows`` in a table of ``columns`` of ``source``, read as a model of ``model_columns``
    (default: the same columns)."""
    config = configure(source, source.create(TABLE, columns, rows), model_columns or columns)
    return Reading(config, reader_for(config.source("src")))


def bounds(lower: datetime, upper: datetime) -> ReadBounds:
    return ReadBounds(lower, upper, Window(lower, upper))


# -- the tenant filter ----------------------------------------------------------------------------------


def tenant_ids(source: TestSource) -> tuple[list[str], list[str]]:
    """(the tenants read, the others): ids that hold quotes, a backslash and pattern characters,
    and others that a careless comparison would take for them. A schema-tenanted source's ids
    are names of schemas (databases, folders) shared with other tests: each holds the test's
    token; an id the vendor says cannot name a schema is left out."""
    token = source.token
    quoted = f"o'bri\"en\\{token}"
    read = [quoted, f"a%{token}", f"a*{token}"]
    others = [f"acme{token}",  # what LIKE 'a%...' or the glob 'a*...' would also select
              quoted.upper(), quoted + " ", f"{quoted}x", f"o''bri\"\"en\\{token}", f"o'bri\"en{token}"]
    if not source.multi_tenant:
        vendor = SOURCES[source.vendor]
        others = [t for t in others if vendor.tenant_id_problem(t, uses_source_query=False) is None]
    return read, others


def tenant_rows(tenant: str) -> list[dict]:
    """Ids 1..3 for every tenant (the same ids: a row of another tenant shows as its payload)."""
    return [{"id": k, "updated_at": MIN_START + timedelta(hours=k), "payload": tenant} for k in (1, 2, 3)]


@pytest.mark.integration
def test_only_the_tenants_own_rows_come_back(spark, source: TestSource) -> None:
    read, others = tenant_ids(source)
    model = reading(source, {t: tenant_rows(t) for t in [*read, *others]})
    halves = [bounds(MIN_START, MIN_START + timedelta(hours=2)), bounds(MIN_START + timedelta(hours=2), NOW)]

    for tenant in read:
        assert [(r["id"], r["payload"]) for r in model.rows(spark, tenant)] == [(1, tenant), (2, tenant), (3, tenant)]
        assert model.count(spark, tenant) == 3, tenant
        together = sorted((r[WINDOW_COLUMN], r["id"], r["payload"]) for r in model.together(spark, tenant, halves))
        assert together == [(0, 1, tenant), (1, 2, tenant), (1, 3, tenant)]


# -- the read bounds -------------------------------------------------------------------------------------

#: the previous transfer: it ran at PREVIOUS_RUN and delivered rows up to LAST_DELIVERED
PREVIOUS_RUN = day(3, 2) + timedelta(hours=12)
LAST_DELIVERED = day(3, 2) + timedelta(hours=6, microseconds=500_000)
#: this transfer's "now": it reads two daily windows, [.., 3-3) and [3-3, RUN)
RUN = day(3, 3) + timedelta(hours=6)
MICROSECOND = timedelta(microseconds=1)


def boundary_rows(lookback: timedelta) -> dict[str, tuple[datetime | None, tuple[int, ...]]]:
    """Rows at and around each bound of this transfer's two windows: name -> (last-modified
    value, the windows that read it), as the reference says (the first read starts at the last
    delivered value minus the lookback; the lower bound is inclusive, the upper exclusive; every
    read reaches the lookback before its window's start; a NULL value is read)."""
    lower = LAST_DELIVERED - lookback
    return {
        "just before the lookback": (lower - MICROSECOND, ()),
        "at the lookback's start": (lower, (0,)),
        "the last delivered value": (LAST_DELIVERED, (0,)),
        "a late commit after it": (LAST_DELIVERED + timedelta(seconds=1), (0,)),
        "the first window's last microsecond": (day(3, 3) - MICROSECOND, (0, 1)),
        "at the first window's end": (day(3, 3), (1,)),
        "the run's last microsecond": (RUN - MICROSECOND, (1,)),
        "at the run's now": (RUN, ()),
        "a NULL last-modified value": (None, (0, 1)),
    }


@pytest.mark.integration
def test_the_next_read_starts_at_the_last_delivered_value_minus_the_lookback(spark, source: TestSource) -> None:
    lookback = REFERENCE_LOOKBACK.get(source.vendor, OTHER_VENDORS_LOOKBACK)
    expected = boundary_rows(timedelta(seconds=lookback))
    tenant, other = f"o'bri\"en{source.token}", f"other{source.token}"
    rows = [{"id": k, "updated_at": at, "payload": name} for k, (name, (at, _)) in enumerate(expected.items())]
    model = reading(source, {tenant: rows, other: [{**r, "payload": "another tenant"} for r in rows]})
    state = ModelState(watermark=PREVIOUS_RUN, high_watermark=LAST_DELIVERED,
                       completed=(Window(MIN_START, PREVIOUS_RUN),))

    planned = plan_windows(windowing_for(model.config, "dst", model.config.model(MODEL)), now=RUN, state=state)

    windows = [p.bounds for p in planned]
    assert [(b.lower, b.upper) for b in windows] == [
        (LAST_DELIVERED - timedelta(seconds=lookback), day(3, 3)), (day(3, 3) - timedelta(seconds=lookback), RUN)]
    for i, window in enumerate(windows):
        want = sorted(name for name, (_, read_by) in expected.items() if i in read_by)
        assert sorted(r["payload"] for r in model.rows(spark, tenant, window)) == want, f"window {i}"
        assert model.count(spark, tenant, window) == len(want), f"window {i}"
    together = {(r["payload"], r[WINDOW_COLUMN]) for r in model.together(spark, tenant, windows)}
    null = "a NULL last-modified value"
    assert ({(name, i) for name, (_, read_by) in expected.items() for i in read_by if name != null}
            == {(name, i) for name, i in together if name != null})
    assert (null, 0) in together  # the first window refuses it


# -- every data type ----------------------------------------------------------------------------------

#: values of each data type of the model (the last row of each column: NULL)
VALUES: dict[str, list] = {
    "string": ["plain", "ünïcödé ✓ 漢字 😀", "quotes ' \" \\ and a trailing space ", None],
    "integer": [2**63 - 1, -(2**63), 0, None],
    "float": [1.5, -2.25e-300, 1e300, None],
    "boolean": [True, False, True, None],
    "timestamp": [datetime(2024, 3, 1, 12, 34, 56, 789012, tzinfo=UTC),
                  datetime(2024, 3, 2, 1, 0, tzinfo=timezone(timedelta(hours=2))),  # 2024-03-01 23:00 UTC
                  datetime(1970, 1, 1, tzinfo=UTC), None],
    "date": [date(2024, 2, 29), date(1999, 12, 31), date(9999, 12, 31), None],
    "decimal": [Decimal("12345678901234567890123456789.123456789"), Decimal("-0.000000001"), Decimal(0), None],
    "json": ['{"a": 1, "b": [true, null, "ü"]}', "[]", '"text"', None],
}
TYPED_COLUMNS = {"id": "integer", "updated_at": "timestamp", **{f"{t}_value": t for t in VALUES}}


def typed_rows() -> list[dict]:
    return [{"id": i, "updated_at": MIN_START + timedelta(hours=i), **{f"{t}_value": v[i] for t, v in VALUES.items()}}
            for i in range(len(VALUES["string"]))]


def test_the_values_cover_every_data_type_of_the_model() -> None:
    assert sorted(VALUES) == sorted(TYPES)
    assert all(values[-1] is None for values in VALUES.values())


def same_value(data_type: str, got: object, want: object) -> bool:
    if data_type == "json" and got is not None and want is not None:  # a source may normalize JSON's text
        return json.loads(got) == json.loads(want)
    if data_type == "timestamp" and got is not None:
        return got.utcoffset() == timedelta(0) and got == want
    return type(got) is type(want) and got == want


@pytest.mark.integration
def test_every_data_type_comes_back_with_its_value(spark, source: TestSource) -> None:
    tenant = f"o'bri\"en{source.token}"
    model = reading(source, {tenant: typed_rows(), f"other{source.token}": typed_rows()[:1]}, TYPED_COLUMNS)
    model.check_read(spark, tenant)

    frame = model.reader.read(spark, model.request(tenant))
    assert {f.name: f.dataType.simpleString() for f in frame.schema.fields} == {
        name: TYPES[data_type].spark for name, data_type in TYPED_COLUMNS.items()}
    got = model.rows(spark, tenant)
    assert [r["id"] for r in got] == list(range(len(VALUES["string"])))
    for data_type, values in VALUES.items():
        column = [r[f"{data_type}_value"] for r in got]
        assert all(same_value(data_type, g, w) for g, w in zip(column, values, strict=True)), (
            f"{data_type} ({source.native_types[data_type]}): got {column}, want {values}")


# -- check_read's refusals ------------------------------------------------------------------------------


def refusal(spark, model: Reading, tenant: str) -> tuple[str, str]:
    """(the message, the fix) check_read refuses the read with."""
    with pytest.raises(TransferPlatformError) as caught:
        model.check_read(spark, tenant)
    error = caught.value
    fix = error.problems[0].fix if isinstance(error, ConfigError) else getattr(error, "fix", "")
    assert fix, f"no fix in: {error}"
    return str(error), fix


@pytest.mark.integration
def test_check_read_refuses_a_missing_table_naming_it(spark, source: TestSource) -> None:
    tenant = f"o'bri\"en{source.token}"
    source_table = source.create(TABLE, COLUMNS, {tenant: tenant_rows(tenant)})
    config = configure(source, source_table.replace(TABLE, "no_such_table"), COLUMNS)
    model = Reading(config, reader_for(config.source("src")))

    message, fix = refusal(spark, model, tenant)

    assert "no_such_table" in message
    assert "source_table" in fix or "<table>" in fix, fix


@pytest.mark.integration
def test_check_read_refuses_a_missing_column_naming_it(spark, source: TestSource) -> None:
    tenant = f"o'bri\"en{source.token}"
    model = reading(source, {tenant: tenant_rows(tenant)},
                    model_columns={**COLUMNS, "no_such_column": "string"})

    message, fix = refusal(spark, model, tenant)

    assert "no_such_column" in message
    assert "name_in_source" in fix, fix


@pytest.mark.integration
def test_check_read_refuses_a_column_its_data_type_cannot_read(spark, source: TestSource) -> None:
    tenant = f"o'bri\"en{source.token}"
    rows = [{**r, "on_date": date(2024, 3, 1)} for r in tenant_rows(tenant)]
    model = reading(source, {tenant: rows}, {**COLUMNS, "on_date": "date"},
                    model_columns={**COLUMNS, "on_date": "boolean"})

    message, fix = refusal(spark, model, tenant)

    assert "'on_date'" in message
    assert "boolean" in message
    assert "date" in fix, fix  # the data types it can be read as


@pytest.mark.integration
def test_check_read_refuses_a_read_without_the_right_naming_the_grant(spark, source_with_rights: TestSource) -> None:
    source = source_with_rights
    tenant = f"o'bri\"en{source.token}"
    model = reading(source, {tenant: tenant_rows(tenant)})
    model.check_read(spark, tenant)  # the least-privilege reader may read
    source.withhold_read(TABLE)

    message, fix = refusal(spark, model, tenant)

    assert "denied" in message.lower(), message
    assert source.refused_read_fix in fix, fix


@pytest.mark.integration
@pytest.mark.parametrize("variant", sources.variants(only=("mysql",)))
def test_a_wrong_password_is_not_told_as_a_missing_grant(spark, variant, request, tmp_path, monkeypatch) -> None:
    """The server refuses a wrong password with "Access denied" too: that is no grant to give."""
    source = sources.make(*variant, sources.new_place(request, tmp_path, monkeypatch))
    tenant = f"o'bri\"en{source.token}"
    model = reading(source, {tenant: tenant_rows(tenant)})
    monkeypatch.setenv(sources.MYSQL_PASSWORD_ENV, "not-the-password")

    message, fix = refusal(spark, model, tenant)

    assert "GRANT" not in fix, fix
    assert "not-the-password" not in message


# -- a tenant without rows -------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_tenant_without_rows_reads_an_empty_frame_of_the_models_columns(spark, source: TestSource) -> None:
    tenant, empty = f"o'bri\"en{source.token}", f"empty'\"{source.token}"
    model = reading(source, {tenant: typed_rows(), empty: []}, TYPED_COLUMNS)

    model.check_read(spark, empty)
    frame = model.reader.read(spark, model.request(empty))

    assert {f.name: f.dataType.simpleString() for f in frame.schema.fields} == {
        name: TYPES[data_type].spark for name, data_type in TYPED_COLUMNS.items()}
    assert frame.toArrow().num_rows == 0
    assert model.count(spark, empty) == 0
    assert model.together(spark, empty, [bounds(MIN_START, day(3, 2)), bounds(day(3, 2), NOW)]) == []
