"""Configurations of the tests: the events model, one source and one destination (PostgreSQL by
default), and the same configuration with its columns changed; the configuration tests' small valid
file (:func:`valid_raw`) and the problems a refused one is reported with (:func:`problems_of`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform.errors import ConfigError
from transfer_platform_tests.support.events import MODEL, epoch
from transfer_platform_tests.support.postgres import pg_connection_config

DESTINATION = "dst"


def events_model(source_table: str, *, min_start: datetime, source_name: str = "src") -> dict:
    return {
        "model_name": MODEL,
        "source_name": source_name,
        "source_table": source_table,
        "organization_column": "organization_id",
        "max_transfer_time_window_seconds": 86400,
        "min_start_time_epoch": epoch(min_start),
        "columns": [
            {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
            {"name_in_source": "organization_id", "data_type": "string"},
            {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
            {"name_in_source": "payload", "data_type": "string"},
        ],
    }


def pg_config(*, source_schema: str, dst_schema: str, tenant: str, min_start: datetime,
              table: str = "events", parallel: int = 1, source_port: int | None = None,
              dst_port: int | None = None) -> PlatformConfig:
    source_connection = pg_connection_config()
    if source_port is not None:
        source_connection["port"] = source_port
    dst_connection = pg_connection_config(dst_schema)
    if dst_port is not None:
        dst_connection["port"] = dst_port
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": source_connection,
                     "max_concurrent_queries_per_transfer": parallel}],
        "models": [events_model(f"{source_schema}.{table}", min_start=min_start)],
        "recipients": [{"name": "rcpt", "id_in_provider_system": tenant}],
        "destinations": [{"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt",
                          "connection": dst_connection}],
    }, now=datetime(2024, 6, 1, tzinfo=UTC))


def with_columns(config: PlatformConfig, *, add: list = (), remove: list[str] = (),
                 key: list[str] | None = None, types: dict[str, str] | None = None) -> PlatformConfig:
    """The same configuration with the (single) model's columns changed: ``add`` ColumnConfigs,
    ``remove`` by source name, ``key`` the primary key columns, ``types`` new data types by name."""
    model = config.model(MODEL)
    columns = [c for c in model.columns if c.name_in_source not in remove] + list(add)
    if key is not None:
        columns = [c.model_copy(update={"is_primary_key": c.name_in_source in key}) for c in columns]
    if types:
        columns = [c.model_copy(update={"data_type": types.get(c.name_in_source, c.data_type)}) for c in columns]
    return config.model_copy(update={"models": [model.model_copy(update={"columns": columns})]})


def config_for(source: dict, model: dict, *, tenant: str, dst_schema: str) -> PlatformConfig:
    """One source (named ``src``), one model, one recipient with id ``tenant`` and its PostgreSQL
    destination ``dst`` in ``dst_schema``."""
    return parse_config({
        "sources": [{"name": "src", **source}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": tenant}],
        "destinations": [{"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt",
                          "connection": pg_connection_config(dst_schema)}],
    })


# -- the configuration tests' file (config/) ---------------------------------------------------

#: the clock the configuration tests parse with (``parse_config(raw, now=NOW)``)
NOW = datetime(2025, 6, 1, tzinfo=UTC)


def valid_raw() -> dict[str, Any]:
    """A small valid configuration (a fresh copy each call)."""
    return {
        "sources": [
            {
                "name": "app_db",
                "vendor": "postgres",
                "connection": {"host": "localhost", "port": 5432, "database": "app",
                               "username": "reader", "password": "${PG_PASSWORD}"},
            },
            {"name": "lake", "vendor": "parquet", "connection": {"path": "lake"}},
        ],
        "models": [
            {
                "model_name": "orders",
                "source_name": "app_db",
                "source_table": "public.orders",
                "organization_column": "organization_id",
                "max_transfer_time_window_seconds": 86_400,
                "min_start_time_epoch": 1_700_000_000,
                "columns": [
                    {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                    {"name_in_source": "organization_id", "data_type": "string"},
                    {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
                ],
            },
        ],
        "recipients": [{"name": "acme", "id_in_provider_system": "org_1"}],
        "destinations": [
            {"name": "acme_lake", "vendor": "delta", "recipient": "acme", "connection": {"path": "out"}},
        ],
    }


def problems_of(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, message) of each problem ``raw`` is refused with (it must be refused, each problem
    with a message)."""
    with pytest.raises(ConfigError) as info:
        parse_config(raw, now=NOW)
    problems = info.value.problems
    assert problems, "a ConfigError must list its problems"
    for problem in problems:
        assert problem.message.strip(), problem
    return [(p.path, p.message) for p in problems]
