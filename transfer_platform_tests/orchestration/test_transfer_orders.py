"""One transfer order, whoever asks: what the command line, the API, the schedule sensor and its
repairs ask becomes the ``transfer`` job's run config and tags, and the job's op reads the same
order back from them.

Pure: a parsed configuration in, dictionaries and orders out (the queue, the sensor and the op
themselves are exercised in ``test_sensor.py``, ``test_transfer_job.py`` and the API's tests).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from transfer_platform.config.loading import load_config
from transfer_platform.config.models import PlatformConfig
from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    DRY_RUN_TAG,
    FULL_REFRESH_TAG,
    MODELS_TAG,
    SCHEDULED_FOR_TAG,
    TRIGGER_TAG,
    USER_TAG_PREFIX,
    order_of_run,
    transfer_op_config,
    transfer_run_config,
    transfer_tags,
)
from transfer_platform.transfers.order import TransferOrder
from transfer_platform_tests.support.platform import write_config

JAN_1 = datetime(2025, 1, 1, tzinfo=UTC)
JAN_2 = datetime(2025, 1, 2, tzinfo=UTC)


@pytest.fixture
def config(tmp_path: Path) -> PlatformConfig:
    """acme_delta, receiving items and notes."""
    return load_config(write_config(tmp_path))


def test_a_scheduled_transfer_names_only_its_destination() -> None:
    """The sensor's run: every model from the watermark, nothing else stated."""
    order = TransferOrder(destination="acme_delta", tick=JAN_1, trigger="sensor")
    assert transfer_run_config(order) == {"ops": {"run_transfer": {"config": {"destination": "acme_delta"}}}}


def test_a_transfer_a_person_asks_for_states_its_models_and_full_refresh() -> None:
    """``transfer --enqueue`` and the API: as the launchpad shows the op's config."""
    asked = TransferOrder(destination="acme_delta", trigger="cli")
    assert transfer_op_config(transfer_run_config(asked, stating_defaults=True)) == {
        "destination": "acme_delta", "models": [], "full_refresh": False}
    windowed = TransferOrder(destination="acme_delta", models=["items"], start=JAN_1, end=JAN_2, dry_run=True,
                             trigger="api")
    assert transfer_op_config(transfer_run_config(windowed, stating_defaults=True)) == {
        "destination": "acme_delta", "models": ["items"], "full_refresh": False,
        "start": "2025-01-01T00:00:00+00:00", "end": "2025-01-02T00:00:00+00:00", "dry_run": True}


def test_a_repair_names_its_model_and_window() -> None:
    order = TransferOrder(destination="acme_delta", models=["items"], start=JAN_1, end=JAN_2, trigger="repair")
    assert transfer_op_config(transfer_run_config(order)) == {
        "destination": "acme_delta", "models": ["items"],
        "start": "2025-01-01T00:00:00+00:00", "end": "2025-01-02T00:00:00+00:00"}


def test_the_tags_say_who_asked_what(config: PlatformConfig) -> None:
    order = TransferOrder(destination="acme_delta", models=["items"], full_refresh=True, dry_run=True,
                          tags={"team": "data"}, trigger="api")
    tags = transfer_tags(config, order, [config.model("items")])
    assert (tags[DESTINATION_TAG], tags[MODELS_TAG], tags[TRIGGER_TAG]) == ("acme_delta", "items", "api")
    assert (tags[FULL_REFRESH_TAG], tags[DRY_RUN_TAG], tags[USER_TAG_PREFIX + "team"]) == ("true", "true", "data")
    assert SCHEDULED_FOR_TAG not in tags
    scheduled = transfer_tags(config, TransferOrder(destination="acme_delta", tick=JAN_1, trigger="sensor"),
                              config.models_for(config.destination("acme_delta")))
    assert scheduled[SCHEDULED_FOR_TAG] == "2025-01-01T00:00:00.000000+00:00"
    assert not {FULL_REFRESH_TAG, DRY_RUN_TAG} & set(scheduled)


@pytest.mark.parametrize("order", [
    TransferOrder(destination="acme_delta", tick=JAN_1, trigger="sensor"),
    TransferOrder(destination="acme_delta", models=["items", "notes"], full_refresh=True, tags={"t": "1"}),
    TransferOrder(destination="acme_delta", models=["items"], start=JAN_1, end=JAN_2, dry_run=True, trigger="api"),
    TransferOrder(destination="acme_delta", models=["items"], start=JAN_1, end=JAN_2, trigger="repair"),
], ids=["sensor", "cli-full-refresh", "api-dry-run", "repair"])
def test_the_op_reads_back_the_order_its_run_was_asked(config: PlatformConfig, order: TransferOrder) -> None:
    models = [config.model(name) for name in order.models] or config.models_for(config.destination("acme_delta"))
    run_config = transfer_run_config(order, stating_defaults=order.trigger in ("cli", "api"))
    assert order_of_run(transfer_op_config(run_config), transfer_tags(config, order, models)) == order


def test_a_run_launched_by_hand_was_asked_by_dagster() -> None:
    """The launchpad's run: no trigger tag, or one this version does not know."""
    assert order_of_run({"destination": "acme_delta"}, {}).trigger == "dagster"
    assert order_of_run({"destination": "acme_delta"}, {TRIGGER_TAG: "someone"}).trigger == "dagster"


def test_an_order_is_a_value() -> None:
    models, tags = ["items"], {"team": "data"}
    order = TransferOrder(destination="acme_delta", models=models, tags=tags)
    models.append("notes")
    tags["team"] = "ops"
    assert (order.models, order.tags) == (("items",), {"team": "data"})
    assert TransferOrder(destination="acme_delta", models=None).models == ()
    with pytest.raises(ValueError, match="unknown trigger 'ui'"):
        TransferOrder(destination="acme_delta", trigger="ui")
