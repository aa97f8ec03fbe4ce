"""``SourceReader.count`` (the dry run's row counts) equals what ``read`` returns, on every source.

MariaDB is the hard case: its default collations are case-, accent- and trailing-space-
insensitive, so the tenant predicate alone matches ``ACME``, ``acme `` and ``acmé`` too; the read
keeps only the exact tenant in Spark, and the count must agree (utf8mb4 and latin1 columns: the
bytes of a latin1 value are not the UTF-8 bytes of the configured id).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.errors import ConfigError
from transfer_platform.sources.base import ReadRequest, reader_for
from transfer_platform_tests.support.config import config_for, events_model, pg_config
from transfer_platform_tests.support.events import MODEL, create_events, day, insert_rows, make_rows
from transfer_platform_tests.support.mysql import mysql_insert_rows, mysql_source

pytestmark = pytest.mark.integration

MIN_START = day(3, 1)
DATA_DAYS = [day(3, 1), day(3, 2), day(3, 3)]
WHOLE = ReadBounds(MIN_START, day(3, 4), Window(MIN_START, day(3, 4)))
ONE_DAY = ReadBounds(day(3, 2) - timedelta(seconds=5), day(3, 3), Window(day(3, 2), day(3, 3)))


def both(spark, reader, request: ReadRequest) -> tuple[int, int]:
    return reader.count(spark, request), reader.read(spark, request).count()


@pytest.mark.parametrize("charset", ["utf8mb4", "latin1"])
@pytest.mark.parametrize("tenant", ["acme", "acmé"])
def test_mysql_count_is_exact_under_case_insensitive_collations(spark, mysql_conn, mysql_database,
                                                                charset, tenant) -> None:
    with mysql_conn.cursor() as cur:
        cur.execute("CREATE TABLE events (id BIGINT PRIMARY KEY, organization_id VARCHAR(100), "
                    "updated_at DATETIME(6) NULL, payload TEXT, KEY (organization_id)) "
                    f"CHARACTER SET {charset}")
    lookalikes = ["acme", "ACME", "acme ", "acmé", "ACMÉ", "globex"]
    rows = make_rows(lookalikes, 6, DATA_DAYS, seed=4)
    mysql_insert_rows(mysql_conn, rows)
    config = config_for(mysql_source(mysql_database), events_model("events", min_start=MIN_START),
                        tenant=tenant, dst_schema="unused")
    reader = reader_for(config.source("src"))
    for bounds in (WHOLE, ONE_DAY):
        request = ReadRequest(config.model(MODEL), tenant, bounds, "dst")
        expected = sum(1 for r in rows if r[1] == tenant and bounds.lower <= r[2] < bounds.upper)
        assert both(spark, reader, request) == (expected, expected)
    assert expected > 0


def test_postgres_count_follows_the_read(spark, pg_conn, pg_schema) -> None:
    create_events(pg_conn, pg_schema)
    rows = make_rows(["o'reilly\\x", "o'reilly", "globex"], 9, DATA_DAYS, seed=2)
    insert_rows(pg_conn, pg_schema, rows)
    config = pg_config(source_schema=pg_schema, dst_schema="unused", tenant="o'reilly\\x", min_start=MIN_START)
    reader = reader_for(config.source("src"))
    request = ReadRequest(config.model(MODEL), "o'reilly\\x", ONE_DAY, "dst")
    assert both(spark, reader, request) == (3, 3)

    # a source_query: the predicates go outside it, for the count too
    query = f'SELECT * FROM "{pg_schema}".events WHERE payload IS NOT NULL'
    model = config.model(MODEL).model_copy(update={"source_table": None, "source_query": query})
    whole = ReadRequest(model, "o'reilly\\x", WHOLE, "dst")
    expected = sum(1 for r in rows if r[1] == "o'reilly\\x" and r[3] is not None)
    assert both(spark, reader, whole) == (expected, expected)

    # a count that cannot run fails as the read does: with the model, never the connection settings
    broken = model.model_copy(update={"source_query": f'SELECT id FROM "{pg_schema}".events'})
    with pytest.raises(ConfigError, match="does not return the column"):
        reader.count(spark, ReadRequest(broken, "o'reilly\\x", WHOLE, "dst"))
