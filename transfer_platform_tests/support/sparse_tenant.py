"""The scenario of a sparse tenant: 61 daily windows from Jan 1st, four of the tenant's rows in
three of them, another tenant's rows on other days (the empty-windows tests and those reading
windows together), and the configuration of the events model from PostgreSQL to a destination of
each vendor.
"""

from __future__ import annotations

from datetime import timedelta

from transfer_platform.config.parsing import parse_config
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.events import day
from transfer_platform_tests.support.postgres import pg_connection_config

TENANT, OTHER = "sparse'one", "busy"


MIN_START = day(1, 1)


NOW = day(3, 1) + timedelta(hours=5)  # 61 daily windows (2024 is a leap year), the last in progress


ROWS = [(1, TENANT, day(1, 3) + timedelta(hours=2), "a"), (2, TENANT, day(1, 3) + timedelta(hours=9), "b"),
        (3, TENANT, day(2, 10) + timedelta(microseconds=1), "c"), (4, TENANT, day(3, 1) + timedelta(hours=1), "d")]


OTHERS = [(100 + d, OTHER, day(1, 1) + timedelta(days=d, hours=3), "x") for d in range(59)]


def config_for(vendor: str, source_schema: str, where, *, tenant: str = TENANT,
               payload_type: str = "string", now=NOW) -> object:
    """The events model from PostgreSQL to one destination of ``vendor`` (in ``where``)."""
    connection = {"postgres": pg_connection_config(where), "delta": {"path": str(where)},
                  "local": {"path": str(where)}}[vendor]
    destination = {"name": DESTINATION, "recipient": "rcpt", "vendor": vendor, "connection": connection}
    if vendor == "local":
        destination["signing_key"] = "${TP_TEST_SIGNING_KEY}"
    model = events_model(f"{source_schema}.events", min_start=MIN_START)
    model["columns"][3]["data_type"] = payload_type
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": tenant}],
        "destinations": [destination],
    }, now=now)


