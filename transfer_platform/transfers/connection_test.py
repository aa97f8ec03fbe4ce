"""``test-connection``: can the platform do everything a transfer needs with a source or destination?

The reference system's "test destination", for sources too. Each vendor module probes its own
place (``probe(models)`` on its reader or writer): reachability (a TCP connection, or the folder),
authentication, then every right the transfers need, each tried for real and undone at once:

- a database destination: in one transaction that is rolled back, create the schema if it is
  missing, create, write, alter, rename and drop a probe table, take a model's lock; the model
  tables that exist must belong to the loader (a full refresh drops them, evolution alters them);
- a folder destination: create, write, rename, read and delete a probe file and folder, in the
  root and in each existing table's folder and commit log;
- a database source: each model's read, exactly as a transfer sends it (its columns, tenant and
  change predicates), run as ``... LIMIT 0`` in a read-only transaction, for each tenant whose
  rows live in a schema of their own;
- a Parquet lake: each model's table folder is there, readable, and has the model's columns.

Nothing is left behind. Each check is one line, passed or failed; a failed one says what was
refused and the ``GRANT`` or setting that fixes it. A failed connection skips the checks that
need it (they are listed as skipped, not passed).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from transfer_platform.errors import ConfigError
from transfer_platform.probes import Check

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig, PlatformConfig

def connection_targets(config: PlatformConfig, name: str) -> list[tuple[str, object, list[ModelConfig]]]:
    """The sources and destinations called ``name`` with the models each serves."""
    found: list[tuple[str, object, list[ModelConfig]]] = []
    for destination in config.destinations:
        if destination.name == name:
            found.append((f"destination '{name}'", destination, config.models_for(destination)))
    for source in config.sources:
        if source.name == name:
            found.append((f"source '{name}'", source, [m for m in config.models if m.source_name == name]))
    if not found:
        known = sorted({d.name for d in config.destinations} | {s.name for s in config.sources})
        raise ConfigError(f"no source or destination named {name!r}; configured: {', '.join(known) or '(none)'}")
    return found


def tenants_of(config: PlatformConfig, model: ModelConfig) -> list[str]:
    """The tenant ids whose rows a model is read for (recipients of destinations receiving it)."""
    ids = []
    for destination in config.destinations:
        if model in config.models_for(destination):
            tenant = config.recipient(destination.recipient).id_in_provider_system
            if tenant not in ids:
                ids.append(tenant)
    return ids


def run_connection_test(config: PlatformConfig, name: str) -> list[Check]:
    """Every check of the source(s) and destination(s) called ``name``, in order."""
    from transfer_platform.destinations.base import writer_for
    from transfer_platform.sources.base import reader_for

    checks: list[Check] = []
    for target, configured, models in connection_targets(config, name):
        if target.startswith("destination"):
            writer = writer_for(configured)
            try:
                checks.extend(writer.probe(models, target))
            finally:
                writer.close()
        else:
            tenants = {m.model_name: tenants_of(config, m) for m in models}
            checks.extend(reader_for(configured).probe(models, tenants, target))
    return checks


def lines(checks: list[Check]) -> Iterator[str]:
    yield from (check.line() for check in checks)
    failed = sum(check.failed for check in checks)
    skipped = sum(check.outcome == "SKIP" for check in checks)
    yield (f"{len(checks)} check(s): {len(checks) - failed - skipped} passed, {failed} failed"
           + (f", {skipped} skipped" if skipped else ""))
