"""Asset keys and groups: ``<recipient>/<model>``, grouped by recipient; sources under ``source/``."""

from __future__ import annotations

from dagster import AssetKey

from transfer_platform.config.models import ModelConfig

SOURCE_GROUP = "sources"


def transfer_asset_key(recipient: str, model: str) -> AssetKey:
    return AssetKey([recipient, model])


def source_asset_key(model: ModelConfig) -> AssetKey:
    """The source table (or the model's custom query) the model reads, for lineage."""
    if model.source_table:
        table = model.source_table.replace(".", "__")
    else:
        table = f"{model.model_name}__source_query"
    return AssetKey(["source", model.source_name, table])
