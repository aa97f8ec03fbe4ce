"""Run tags and run-queue limits, derived from the configuration.

Every run that touches a destination carries tags saying which destination, models and sources
it touches; the run queue (``dagster-daemon``) counts runs per tag and starts a queued run only
when every limit holds:

- ``.dagster/transfer_platform/dest_slots_<N> = <destination>``: at most N runs per destination, N being
  the destination's ``max_concurrent_transfers`` (one rule per distinct N, limit N per value);
- ``.dagster/transfer_platform/model/<model> = <destination>``: one run per destination and model (a run
  over several models carries one such tag per model);
- ``.dagster/transfer_platform/source/<source> = transfer``: at most the source's
  ``max_concurrent_transfers`` runs reading from it;
- integrity runs carry the model tags of *every* model of their destination, so an integrity run
  never runs beside a transfer to the same destination.

The rules are generated from the configuration (:func:`queue_rules`) by the run coordinator, so
they follow the file without editing ``dagster.yaml``. Nothing here imports Dagster.

What a user reads in the runs list stays in sight under ``transfer_platform/``: the destination,
the models, the kind, the transfer's status and rows moved (written when it ends), full refresh,
the user's own tags and a repair's origin. Bookkeeping (the limit keys above, the heartbeat, the run
worker, the scheduled tick, model counts, sweep markers) sits under :data:`HIDDEN_PREFIX`,
``.dagster/transfer_platform/``: Dagster's webserver leaves every run tag whose key starts with
``.dagster/`` out of its GraphQL answers (``dagster._core.storage.tags.HIDDEN_TAG_PREFIX``,
``get_tag_type``), so the UI never shows them, while run storage, ``RunsFilter`` and the run
queue's tag limits see them like any other tag. It is the one way Dagster offers: the UI's
"pinned tags" are a per-browser setting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.timeutil import isoformat, utc
from transfer_platform.transfers.order import TRIGGERS, TransferOrder

PREFIX = "transfer_platform"
#: Dagster hides run tags starting with ".dagster/" (dagster._core.storage.tags.HIDDEN_TAG_PREFIX,
#: a value repeated, not a name reached: test_ui_failures asserts they still match)
DAGSTER_HIDDEN_PREFIX = ".dagster/"
HIDDEN_PREFIX = f"{DAGSTER_HIDDEN_PREFIX}{PREFIX}"
DESTINATION_TAG = f"{PREFIX}/destination"
MODELS_TAG = f"{PREFIX}/models"  # comma-separated model names
KIND_TAG = f"{PREFIX}/kind"  # transfer | integrity | delete_sweep
FULL_REFRESH_TAG = f"{PREFIX}/full_refresh"
USER_TAG_PREFIX = f"{PREFIX}/tag/"  # user tags of `transfer --tag key=value`
STATUS_TAG = f"{PREFIX}/status"  # Prequel's status of the transfer, once it has ended
ROWS_TAG = f"{PREFIX}/rows_transferred"  # rows moved, once it has ended
#: the schedule tick a sensor-launched transfer belongs to (source staging: that tick's shared read)
SCHEDULED_FOR_TAG = f"{HIDDEN_PREFIX}/scheduled_for"
TRIGGER_TAG = f"{HIDDEN_PREFIX}/trigger"  # who asked: transfers/order.py's TRIGGERS
DRY_RUN_TAG = f"{PREFIX}/dry_run"  # a transfer that only plans (the API's is_debug_mode)
#: the ``transfer`` job's one op, whose config says what a transfer run is asked
TRANSFER_OP = "run_transfer"
#: the ``integrity`` job's one op, whose config names the destination (and models) to check
INTEGRITY_OP = "run_integrity"
KINDS = ("transfer", "integrity", "delete_sweep")

USER_TAG_PATTERN = re.compile(r"[A-Za-z0-9_-]+")  # whole key and value (fullmatch)


def dest_slots_key(limit: int) -> str:
    return f"{HIDDEN_PREFIX}/dest_slots_{limit}"


def model_key(model: str) -> str:
    return f"{HIDDEN_PREFIX}/model/{model}"


def source_key(source: str) -> str:
    return f"{HIDDEN_PREFIX}/source/{source}"


def limit_tags(config: PlatformConfig, destination_name: str, models: list[ModelConfig], kind: str,
               *, with_checks: bool = False) -> dict[str, str]:
    """The tags the run queue counts, for a run of ``kind`` over ``models`` of a destination.

    ``with_checks``: a transfer run that also runs integrity checks (the UI's Materialize sends
    the selected assets' checks along) locks every model of the destination, as an integrity run."""
    if kind not in KINDS:
        raise ValueError(f"unknown run kind {kind!r}; expected one of {KINDS}")
    destination = config.destination(destination_name)
    tags = {
        DESTINATION_TAG: destination.name,
        KIND_TAG: kind,
        MODELS_TAG: ",".join(m.model_name for m in models),
        dest_slots_key(destination.max_concurrent_transfers): destination.name,
    }
    touched = config.models_for(destination) if kind == "integrity" or with_checks else models
    for model in touched:
        tags[model_key(model.model_name)] = destination.name
        tags[source_key(model.source_name)] = kind
    return tags


def queue_rules(config: PlatformConfig) -> list[dict]:
    """``tag_concurrency_limits`` entries enforcing the configuration's limits."""
    rules: list[dict] = []
    for limit in sorted({d.max_concurrent_transfers for d in config.destinations}):
        rules.append({"key": dest_slots_key(limit), "value": {"applyLimitPerUniqueValue": True}, "limit": limit})
    for model in config.models:
        rules.append({"key": model_key(model.model_name), "value": {"applyLimitPerUniqueValue": True},
                      "limit": 1})
    for source in config.sources:
        rules.append({"key": source_key(source.name), "limit": source.max_concurrent_transfers})
    return rules


def op_config(run_config: dict | None, op: str) -> dict:
    """The config of op ``op`` inside a run config (empty if it has none)."""
    return (((run_config or {}).get("ops") or {}).get(op) or {}).get("config") or {}


def transfer_op_config(run_config: dict | None) -> dict:
    """The ``transfer`` job's op config inside a run config (empty for any other run)."""
    return op_config(run_config, TRANSFER_OP)


# -- a transfer order as a run of the ``transfer`` job, and back ---------------------------------


def transfer_run_config(order: TransferOrder, *, stating_defaults: bool = False) -> dict:
    """The run config of a ``transfer`` job run asked ``order``: its destination and each field
    not at its default; ``stating_defaults``: ``models`` and ``full_refresh`` always (a transfer
    a person asked for, through the command line or the API, states them)."""
    op_config: dict = {"destination": order.destination}
    if order.models or stating_defaults:
        op_config["models"] = list(order.models)
    if order.full_refresh or stating_defaults:
        op_config["full_refresh"] = order.full_refresh
    if order.start is not None:
        op_config["start"] = order.start.isoformat()
    if order.end is not None:
        op_config["end"] = order.end.isoformat()
    if order.dry_run:
        op_config["dry_run"] = True
    return {"ops": {TRANSFER_OP: {"config": op_config}}}


def transfer_tags(config: PlatformConfig, order: TransferOrder, models: list[ModelConfig]) -> dict[str, str]:
    """The tags of a ``transfer`` job run asked ``order`` over ``models`` (resolved from it): the
    queue's limits, the user's tags, the schedule tick, who asked, a dry run, a full refresh."""
    tags = {**limit_tags(config, order.destination, models, "transfer"),
            **{USER_TAG_PREFIX + k: v for k, v in order.tags.items()}}
    if order.tick is not None:
        tags[SCHEDULED_FOR_TAG] = isoformat(order.tick)
    tags[TRIGGER_TAG] = order.trigger
    if order.dry_run:
        tags[DRY_RUN_TAG] = "true"
    if order.full_refresh:
        tags[FULL_REFRESH_TAG] = "true"
    return tags


def _moment(text: str | None) -> datetime | None:
    return None if text is None else utc(datetime.fromisoformat(text))


def order_of_run(op_config: Mapping, run_tags: Mapping[str, str]) -> TransferOrder:
    """The order a ``transfer`` job run was asked: its op config (``destination``, ``models``,
    ``full_refresh``, ``start``, ``end``, ``dry_run``) and its tags (the schedule tick, who asked,
    the user's tags). A run launched otherwise (the launchpad) was asked by Dagster."""
    trigger = run_tags.get(TRIGGER_TAG, "dagster")
    return TransferOrder(
        destination=op_config["destination"], models=op_config.get("models") or (),
        full_refresh=bool(op_config.get("full_refresh")), start=_moment(op_config.get("start")),
        end=_moment(op_config.get("end")), dry_run=bool(op_config.get("dry_run")),
        tick=_moment(run_tags.get(SCHEDULED_FOR_TAG)), tags=user_tags_of(dict(run_tags)),
        trigger=trigger if trigger in TRIGGERS else "dagster")


def parse_user_tags(pairs: list[str]) -> dict[str, str]:
    """``key=value`` pairs as given on the command line; both sides must match ``^[A-Za-z0-9_-]+$``."""
    tags: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not USER_TAG_PATTERN.fullmatch(key) or not USER_TAG_PATTERN.fullmatch(value):
            raise ValueError(f"tag {pair!r} must be key=value with letters, digits, '_' or '-' on "
                             "both sides (^[A-Za-z0-9_-]+$)")
        tags[key] = value
    return tags


def user_tags_of(run_tags: dict[str, str]) -> dict[str, str]:
    return {k[len(USER_TAG_PREFIX):]: v for k, v in run_tags.items() if k.startswith(USER_TAG_PREFIX)}
