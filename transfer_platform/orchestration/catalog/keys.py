"""Asset keys and groups.

A transfer asset is one destination/model pair, keyed ``<recipient>/<destination>/<model>``
(``acme/acme_pg/orders``): a recipient may have several destinations (its PostgreSQL and its
bucket), and each pair has its own partitions, watermark, checks and limits. The recipient comes
first so that the UI's catalog folds a recipient's assets together; the group is the destination,
so that "Materialize all" in a group is one run to one destination (a run may only touch one
destination: its limits are per destination). Sources are keyed ``source/<source>/<table>`` in
the ``sources`` group.
"""

from __future__ import annotations

from dagster import AssetKey

from transfer_platform.config.models import ModelConfig, PlatformConfig

SOURCE_GROUP = "sources"


def transfer_asset_key(recipient: str, destination: str, model: str) -> AssetKey:
    return AssetKey([recipient, destination, model])


def destination_asset_key(config: PlatformConfig, destination_name: str, model: str) -> AssetKey:
    """The key of ``model`` delivered to the named destination (its recipient from the configuration)."""
    return transfer_asset_key(config.destination(destination_name).recipient, destination_name, model)


def transfer_group(destination_name: str) -> str:
    return destination_name


def destination_and_model(config: PlatformConfig, key: AssetKey) -> tuple[str, str] | None:
    """(destination, model) of a transfer asset's key, or None for any other key."""
    if len(key.path) != 3:
        return None
    recipient, destination_name, model = key.path
    destination = next((d for d in config.destinations if d.name == destination_name), None)
    if destination is None or destination.recipient != recipient:
        return None
    return destination_name, model


def source_asset_key(model: ModelConfig) -> AssetKey:
    """The source table (or the model's custom query) the model reads, for lineage."""
    if model.source_table:
        table = model.source_table.replace(".", "__")
    else:
        table = f"{model.model_name}__source_query"
    return AssetKey(["source", model.source_name, table])
