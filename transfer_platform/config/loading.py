"""Loading the platform's configuration: the file's entries (read and validated by
:mod:`transfer_platform.config.parsing`), plus the store's where the file names a ``store``
(:mod:`transfer_platform.store.resources`, which validates its entries with the same parsing)."""

from __future__ import annotations

import os
from datetime import datetime

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config, read_file


def load_config(path: str | os.PathLike[str] | None = None, *, now: datetime | None = None) -> PlatformConfig:
    """Read and validate the configuration (the file's entries, plus the store's where the file
    names a ``store``); raise :class:`ConfigError` listing every problem."""
    from transfer_platform.network.addresses import apply_policy

    config_path, raw = read_file(path)
    linked: set[str] = set()
    if raw.get("store") is not None:
        # imported here: a file without a store loads no database client
        from transfer_platform.store.resources import linked_destinations, merge_stored

        raw = merge_stored(raw, source=str(config_path))
        linked = linked_destinations(raw, source=str(config_path))
    config = parse_config(raw, base_dir=config_path.parent, now=now, source=str(config_path))
    apply_policy(config, linked)  # which destinations follow the address policy
    return config
