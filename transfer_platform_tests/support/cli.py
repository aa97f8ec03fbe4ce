"""A transfer run by the command line (``transfer-platform transfer``) as its own process: its
configuration file and the source rows it loads (the crash-safety and lock tests kill or race it).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import yaml

import transfer_platform
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.postgres import pg_connection_config

TENANT = "acme"


PACKAGE_ROOT = str(Path(transfer_platform.__file__).resolve().parents[1])


def write_config(path: Path, *, source_schema: str, dst_schema: str, min_start: datetime,
                 window_seconds: int | None) -> Path:
    model = events_model(f"{source_schema}.events", min_start=min_start)
    if window_seconds is None:
        del model["max_transfer_time_window_seconds"]
    else:
        model["max_transfer_time_window_seconds"] = window_seconds
    path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config(),
                     "max_concurrent_queries_per_transfer": PARALLEL}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt",
                          "connection": pg_connection_config(dst_schema),
                          "max_concurrent_queries_per_transfer": PARALLEL}],
        "spark": {"master": "local[2]", "driver_memory": "1g"},
    }))
    return path


def add_rows(conn: psycopg.Connection, schema: str, *, tenant: str, first_id: int, count: int,
             start: datetime, span: timedelta, payload: str) -> None:
    """``count`` rows with ids from ``first_id``, last-modified spread evenly over
    ``[start, start + span)`` with microseconds."""
    step_us = span / timedelta(microseconds=1) / count
    conn.execute(
        f'INSERT INTO "{schema}".events (id, organization_id, updated_at, payload) '
        "SELECT %(first)s + i, %(tenant)s, %(start)s + make_interval(secs => floor(i * %(step)s) / 1e6), "
        "%(payload)s::text || i FROM generate_series(0, %(count)s - 1) AS i",
        {"first": first_id, "tenant": tenant, "start": start, "step": step_us, "payload": payload,
         "count": count})


PARALLEL = 4
