"""Configuration: one YAML file of sources, models, recipients and destinations."""

from transfer_platform.config.loading import find_config_path, load_config, parse_config
from transfer_platform.config.models import (
    ColumnConfig,
    DatabaseConnection,
    DeltaDestination,
    ModelConfig,
    ParquetSource,
    PlatformConfig,
    PostgresDestination,
    PostgresSource,
    RecipientConfig,
)

__all__ = [
    "ColumnConfig", "DatabaseConnection", "DeltaDestination", "ModelConfig", "ParquetSource",
    "PlatformConfig", "PostgresDestination", "PostgresSource", "RecipientConfig",
    "find_config_path", "load_config", "parse_config",
]
