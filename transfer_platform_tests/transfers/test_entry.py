"""The one entry point of a transfer: which models a transfer of a destination moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from transfer_platform.config.loading import load_config
from transfer_platform.errors import ConfigError
from transfer_platform.transfers.entry import models_of
from transfer_platform_tests.support.platform import write_config


@pytest.fixture
def config(tmp_path: Path):  # a PlatformConfig
    """Destination ``acme_delta`` receives items and notes; ``globex_delta`` only items."""
    return load_config(write_config(tmp_path, destinations={"acme": {}, "globex": {"enabled_models": ["items"]}}))


@pytest.mark.parametrize(("names", "expected"), [
    (None, ["items", "notes"]),
    ([], ["items", "notes"]),
    (["notes"], ["notes"]),
    (["notes", "items", "notes"], ["items", "notes"]),  # the configuration's order, each once
], ids=["none-named", "empty", "one", "reordered-and-repeated"])
def test_the_models_named_in_the_configurations_order(config, names, expected) -> None:
    assert [m.model_name for m in models_of(config, "acme_delta", names)] == expected


@pytest.mark.parametrize(("destination", "names", "unknown", "receives"), [
    ("acme_delta", ["nope", "items"], "['nope']", "['items', 'notes']"),
    ("globex_delta", ["notes"], "['notes']", "['items']"),  # a model, not enabled there
], ids=["not-a-model", "not-enabled-there"])
def test_a_model_the_destination_does_not_receive_is_a_configuration_error(
        config, destination, names, unknown, receives) -> None:
    with pytest.raises(ConfigError) as refused:
        models_of(config, destination, names)
    (problem,) = refused.value.problems
    assert problem.message == (f"destination {destination!r} does not receive model(s) {unknown}; "
                               f"it receives {receives}")
