"""Structured phase logs: one JSON line per phase, carrying transfer id, destination and model,
and never a secret (the destination's password is an environment reference; its value must not
appear in any log line or Dagster event)."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest

from transfer_platform.config.parsing import parse_config
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.events import create_events, day, insert_rows, make_rows
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

SECRET = "s3cr3t-Pa55word-never-logged"


def phase_records(caplog) -> list[dict]:
    found = []
    for record in caplog.records:
        message = record.getMessage()
        if message.startswith("{") and '"phase"' in message:
            found.append(json.loads(message))
    return found


def test_every_phase_is_logged_with_ids_and_no_secret(spark, pg_conn, pg_schema, dst_schema, caplog, monkeypatch):
    monkeypatch.setenv("TP_TEST_DESTINATION_PASSWORD", SECRET)
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows(["acme", "globex"], 10, [day(3, 1), day(3, 2)], seed=41))
    connection = {**pg_connection_config(dst_schema), "password": "${TP_TEST_DESTINATION_PASSWORD}"}
    config = parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [events_model(f"{pg_schema}.events", min_start=day(3, 1))],
        "recipients": [{"name": "rcpt", "id_in_provider_system": "acme"}],
        "destinations": [{"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt", "connection": connection}],
    }, now=day(6, 1))

    with caplog.at_level(logging.DEBUG):
        summary = transfer(spark, config, day(3, 3) + timedelta(hours=1), transfer_id="tid42")

    assert summary.status == "SUCCESS", summary.error
    records = phase_records(caplog)
    phases = [r["phase"] for r in records]
    assert phases[0] == "plan"
    for phase in ("read", "stage", "load", "clean up"):
        assert phase in phases, phases
    assert phases.count("load") == summary.windows == 3
    assert all((r["transfer_id"], r["destination"], r["model"]) == ("tid42", DESTINATION, "events")
               for r in records if not r.get("left_by_a_dead_transfer"))
    assert next(r for r in records if r["phase"] == "load")["rows_transferred"] >= 0
    assert SECRET not in caplog.text
    assert all(SECRET not in str(record.__dict__) for record in caplog.records)
