"""A configuration of many destinations, for the tests of the control plane at scale."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from transfer_platform_tests.support.postgres import pg_connection_config


def write_scale_config(root: Path, destinations: int) -> Path:
    """``destinations`` PostgreSQL destinations ``d<i>`` (recipient ``r<i>``, schema ``scale_<i>``),
    daily, two models on one source table (nothing needs to exist for the sensor)."""
    start = int((datetime.now(UTC) - timedelta(days=3)).replace(hour=0, minute=0, second=0,
                                                               microsecond=0).timestamp())
    columns = [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
               {"name_in_source": "tenant_id", "data_type": "string"},
               {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True}]
    raw = {
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [{"model_name": name, "source_name": "src", "source_table": "scale_events",
                    "organization_column": "tenant_id", "min_start_time_epoch": start, "columns": columns}
                   for name in ("orders", "items")],
        "recipients": [{"name": f"r{i}", "id_in_provider_system": f"tenant-{i}"} for i in range(destinations)],
        "destinations": [{"name": f"d{i}", "recipient": f"r{i}", "vendor": "postgres", "frequency_minutes": 0,
                          "connection": pg_connection_config(f"scale_{i}")} for i in range(destinations)],
    }
    path = root / f"scale_{destinations}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path
