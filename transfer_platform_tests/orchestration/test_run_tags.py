"""Run tags and run-queue rules derived from the configuration, and the user's ``--tag`` pairs.

Pure: a parsed configuration in, dictionaries out (the queue itself is exercised in
``test_coordinator.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.config.models import PlatformConfig
from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    KIND_TAG,
    MODELS_TAG,
    USER_TAG_PREFIX,
    dest_slots_key,
    limit_tags,
    model_key,
    parse_user_tags,
    queue_rules,
    source_key,
    user_tags_of,
)
from transfer_platform_tests.support.platform import model, write_config

PER_VALUE = {"applyLimitPerUniqueValue": True}


@pytest.fixture
def config(tmp_path: Path) -> PlatformConfig:
    """acme_delta (1 slot, every model), globex_delta (3 slots, items and events); two sources:
    ``lake`` (4 transfers at once) reads items and notes, ``archive`` (10, the default) reads events."""
    path = write_config(tmp_path, destinations={
        "acme": {"max_concurrent_transfers": 1},
        "globex": {"max_concurrent_transfers": 3, "enabled_models": ["items", "events"]},
    }, source_limit=4)
    raw = yaml.safe_load(path.read_text())
    raw["sources"].append({"name": "archive", "vendor": "parquet", "connection": {"path": "lake"},
                           "lookback_window": 0})
    raw["models"].append({**model("events"), "source_name": "archive", "source_table": "items"})
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


def test_queue_rules_one_per_distinct_destination_limit_per_model_and_per_source(
        config: PlatformConfig) -> None:
    assert queue_rules(config) == [
        {"key": ".dagster/transfer_platform/dest_slots_1", "value": PER_VALUE, "limit": 1},
        {"key": ".dagster/transfer_platform/dest_slots_3", "value": PER_VALUE, "limit": 3},
        {"key": ".dagster/transfer_platform/model/items", "value": PER_VALUE, "limit": 1},
        {"key": ".dagster/transfer_platform/model/notes", "value": PER_VALUE, "limit": 1},
        {"key": ".dagster/transfer_platform/model/events", "value": PER_VALUE, "limit": 1},
        {"key": ".dagster/transfer_platform/source/lake", "limit": 4},
        {"key": ".dagster/transfer_platform/source/archive", "limit": 10},
    ]


def test_destinations_sharing_a_limit_share_one_rule(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, destinations={
        "acme": {"max_concurrent_transfers": 2}, "globex": {"max_concurrent_transfers": 2}}))
    slot_rules = [r for r in queue_rules(config) if "dest_slots" in r["key"]]
    assert slot_rules == [{"key": dest_slots_key(2), "value": PER_VALUE, "limit": 2}]


def test_transfer_tags_name_the_destination_its_slots_models_and_sources(config: PlatformConfig) -> None:
    models = [config.model("items"), config.model("events")]
    assert limit_tags(config, "globex_delta", models, "transfer") == {
        DESTINATION_TAG: "globex_delta",
        KIND_TAG: "transfer",
        MODELS_TAG: "items,events",
        ".dagster/transfer_platform/dest_slots_3": "globex_delta",
        ".dagster/transfer_platform/model/items": "globex_delta",
        ".dagster/transfer_platform/model/events": "globex_delta",
        ".dagster/transfer_platform/source/lake": "transfer",
        ".dagster/transfer_platform/source/archive": "transfer",
    }


def test_a_one_model_transfer_locks_only_that_model(config: PlatformConfig) -> None:
    tags = limit_tags(config, "acme_delta", [config.model("notes")], "transfer")
    assert tags[dest_slots_key(1)] == "acme_delta"
    assert [k for k in tags if k.startswith(".dagster/transfer_platform/model/")] == [model_key("notes")]
    assert source_key("archive") not in tags


def test_integrity_locks_every_model_of_its_destination_only(config: PlatformConfig) -> None:
    """Whatever subset it checks, an integrity run holds each model tag of the destination, so no
    transfer to that destination runs beside it; models the destination does not receive stay free."""
    tags = limit_tags(config, "globex_delta", [config.model("items")], "integrity")
    assert tags[KIND_TAG] == "integrity"
    assert tags[MODELS_TAG] == "items"
    assert {k: v for k, v in tags.items() if k.startswith(".dagster/transfer_platform/model/")} == {
        model_key("items"): "globex_delta", model_key("events"): "globex_delta"}
    assert tags[source_key("lake")] == "integrity"
    assert tags[source_key("archive")] == "integrity"
    acme = limit_tags(config, "acme_delta", [], "integrity")
    assert {k for k in acme if k.startswith(".dagster/transfer_platform/model/")} == {
        model_key("items"), model_key("notes"), model_key("events")}


def test_every_limit_tag_has_a_rule(config: PlatformConfig) -> None:
    """A tag with no rule would fail open: each destination/model/source tag key is governed."""
    rule_keys = {r["key"] for r in queue_rules(config)}
    for destination in config.destinations:
        for kind in ("transfer", "integrity"):
            tags = limit_tags(config, destination.name, config.models_for(destination), kind)
            governed = {k for k in tags if k not in (DESTINATION_TAG, KIND_TAG, MODELS_TAG)}
            assert governed <= rule_keys


def test_unknown_kind_and_destination_are_refused(config: PlatformConfig) -> None:
    with pytest.raises(ValueError, match="unknown run kind 'backfill'"):
        limit_tags(config, "acme_delta", [], "backfill")
    with pytest.raises(Exception, match="unknown destination 'nowhere'.*acme_delta, globex_delta"):
        limit_tags(config, "nowhere", [], "transfer")


ACCEPTED = [
    (["team=data"], {"team": "data"}),
    (["Team_1=a-B_9", "x=Y"], {"Team_1": "a-B_9", "x": "Y"}),
    (["-=_"], {"-": "_"}),
    (["k=1", "k=2"], {"k": "2"}),
    ([], {}),
]


@pytest.mark.parametrize(("pairs", "expected"), ACCEPTED, ids=["simple", "mixed", "punctuation",
                                                                "last-wins", "none"])
def test_parse_user_tags_accepts(pairs: list[str], expected: dict[str, str]) -> None:
    assert parse_user_tags(pairs) == expected


REFUSED = ["bad tag=x", "team=da ta", "team", "team=", "=data", "team=a=b", "team.x=y", "té=x",
           "team=dätä", "team=a/b", "a:b=c", "team=data!", ""]


@pytest.mark.parametrize("pair", REFUSED)
def test_parse_user_tags_refuses(pair: str) -> None:
    with pytest.raises(ValueError, match=r"\^\[A-Za-z0-9_-\]\+\$") as refused:
        parse_user_tags(["team=ok", pair])
    assert repr(pair) in str(refused.value)


@pytest.mark.parametrize("pair", ["team=data\n", "team\n=data"], ids=["value", "key"])
def test_parse_user_tags_refuses_a_trailing_newline(pair: str) -> None:
    with pytest.raises(ValueError, match="must be key=value"):
        parse_user_tags([pair])


def test_user_tags_round_trip_through_run_tags() -> None:
    run_tags = {USER_TAG_PREFIX + "team": "data", USER_TAG_PREFIX + "ticket": "T-1",
                DESTINATION_TAG: "acme_delta", "dagster/partition": "2025-01-01"}
    assert user_tags_of(run_tags) == {"team": "data", "ticket": "T-1"}
