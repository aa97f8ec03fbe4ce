"""A multi-tenant PostgreSQL source's ``connection.schema``: unqualified table names in
``source_table`` and in a ``source_query`` resolve in that schema (the JDBC ``currentSchema``)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from transfer_platform_tests.support.config import config_for, events_model
from transfer_platform_tests.support.events import (
    create_events,
    day,
    insert_rows,
    make_rows,
    source_rows,
)
from transfer_platform_tests.support.postgres import destination_rows, pg_connection_config
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

TENANT = "acme"
NOW = day(3, 4) + timedelta(hours=12)


@pytest.mark.parametrize("relation", ["source_table", "source_query"])
def test_unqualified_names_resolve_in_the_sources_schema(spark, pg_conn, pg_schema, new_schema, relation):
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "globex"], 10, [day(3, 1), day(3, 2)], seed=41))
    model = events_model("events", min_start=day(3, 1))  # no schema in the name
    if relation == "source_query":
        del model["source_table"]
        model["source_query"] = "SELECT id, organization_id, updated_at, payload FROM events"

    with_schema, without_schema = new_schema(), new_schema()
    source = {"vendor": "postgres", "connection": pg_connection_config(pg_schema)}
    summary = transfer(spark, config_for(source, model, tenant=TENANT, dst_schema=with_schema), NOW)

    assert summary.status == "SUCCESS", summary.error
    assert destination_rows(pg_conn, with_schema) == source_rows(pg_conn, pg_schema, TENANT)
    # the control: without the setting, "events" is looked up on the default search_path
    source = {"vendor": "postgres", "connection": pg_connection_config()}
    summary = transfer(spark, config_for(source, model, tenant=TENANT, dst_schema=without_schema), NOW)
    assert summary.status == "ERROR"
    assert "events" in summary.error
