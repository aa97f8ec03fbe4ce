"""Shards of recipients across code locations (``config/shards.py``): every recipient in exactly
one shard, a recipient's destinations with it, each shard's definitions and sensor holding only
its share, instance-wide upkeep in one shard, and a bad shard named with its fix."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.config.shards import ENV_VAR, Shard, parse_shard, shard_config, shard_of
from transfer_platform.core.lifecycle import EXPIRED_TAG
from transfer_platform.definitions import build_definitions
from transfer_platform.errors import ConfigError
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.orchestration.scheduling.sensors import evaluate_schedule
from transfer_platform_tests.support.dagster import (
    CONFIG_ENV,
    MOCKED_LAUNCHER,
    launch,
    queued_home,
    transfer_run_config,
    workspace,
)
from transfer_platform_tests.support.platform import write_config

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

RECIPIENTS = 40


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    """The test configuration plus 40 recipients, each with a Delta destination due daily, and a
    second destination for the first one (a recipient with two destinations)."""
    path = write_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    for i in range(RECIPIENTS):
        raw["recipients"].append({"name": f"tenant{i:02d}", "id_in_provider_system": f"org-{i}"})
        raw["destinations"].append({"name": f"tenant{i:02d}_delta", "recipient": f"tenant{i:02d}",
                                    "vendor": "delta", "frequency_minutes": 0,
                                    "connection": {"path": f"dest_{i}"}})
    raw["destinations"].append({"name": "tenant00_second", "recipient": "tenant00", "vendor": "delta",
                                "frequency_minutes": 0, "connection": {"path": "dest_second"}})
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_every_recipient_and_destination_is_in_exactly_one_shard(config_path: Path, count: int) -> None:
    whole = load_config(config_path)
    shares = [shard_config(whole, Shard(i, count)) for i in range(count)]
    recipients = [r.name for share in shares for r in share.recipients]
    destinations = [d.name for share in shares for d in share.destinations]
    assert sorted(recipients) == sorted(r.name for r in whole.recipients)  # each once, none lost
    assert sorted(destinations) == sorted(d.name for d in whole.destinations)
    for share in shares:
        assert {d.recipient for d in share.destinations} <= {r.name for r in share.recipients}
        assert share.models == whole.models
        assert share.sources == whole.sources
        for destination in share.destinations:  # look-ups answer from the share
            assert share.destination(destination.name) is destination
            assert share.recipient(destination.recipient).name == destination.recipient
    if count > 1:  # the hash spreads them: no shard is empty or holds everything
        assert all(0 < len(share.recipients) < len(whole.recipients) for share in shares)
        other = next(d.name for d in whole.destinations if d.name not in {x.name for x in shares[0].destinations})
        with pytest.raises(ConfigError, match="unknown destination"):
            shares[0].destination(other)


def test_a_recipient_keeps_its_shard_whatever_else_the_file_holds() -> None:
    # stable across processes (not Python's salted hash) and independent of the other recipients
    assert [shard_of(f"tenant{i:02d}", 4) for i in range(8)] == [shard_of(f"tenant{i:02d}", 4) for i in range(8)]
    assert shard_of("acme", 4) == int.from_bytes(__import__("hashlib").blake2b(b"acme", digest_size=8).digest(),
                                                 "big") % 4


@pytest.mark.parametrize("text", ["1", "a/b", "4/4", "-1/4", "0/0", "1/2/3", "0 of 4"])
def test_a_bad_shard_is_a_config_error_naming_the_variable_and_the_fix(text: str,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       config_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_shard(text)
    message = str(caught.value)
    assert ENV_VAR in message
    assert repr(text) in message
    assert "fix: set TRANSFER_PLATFORM_SHARD to i/n with 0 <= i < n" in message
    monkeypatch.setenv(ENV_VAR, text)  # the code location refuses to load, saying the same
    with pytest.raises(ConfigError, match=ENV_VAR):
        build_definitions(str(config_path))


def test_no_shard_is_every_recipient(config_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_shard(None) is None
    assert parse_shard("  ") is None
    monkeypatch.delenv(ENV_VAR, raising=False)
    whole = load_config(config_path)
    assert shard_config(whole, None) is whole
    assert shard_config(whole, Shard(0, 1)) is whole


def transfer_keys(defs: dg.Definitions) -> set[dg.AssetKey]:
    graph = defs.resolve_asset_graph()
    return {key for key in graph.get_all_asset_keys() if key.path[0] != "source"}


def test_each_shard_defines_and_schedules_only_its_recipients(config_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(config_path))  # the workspace attribute's file
    whole = load_config(config_path)
    every = transfer_keys(build_definitions(str(config_path)))
    seen: set[dg.AssetKey] = set()
    requested: list[str] = []
    with dg.instance_for_test() as instance:
        for index in range(3):
            if index == 1:  # the environment variable and the workspace attribute are the same shard
                monkeypatch.setenv(ENV_VAR, "1/3")
                defs = build_definitions(str(config_path))
                monkeypatch.delenv(ENV_VAR)
            else:
                import transfer_platform.definitions as module
                defs = getattr(module, f"defs_shard_{index}_of_3")()
            share = shard_config(whole, Shard(index, 3))
            keys = transfer_keys(defs)
            assert {key.path[1] for key in keys} == {d.name for d in share.destinations}
            assert not keys & seen
            seen |= keys
            # the sensor: this shard's destinations only; run retention only in shard 0
            sensor = defs.resolve_sensor_def("transfer_schedule")
            platform = defs.resources["platform"]
            assert isinstance(platform, TransferPlatformResource)
            assert platform.shard == f"{index}/3"
            result = sensor(dg.build_sensor_context(instance=instance, resources={"platform": platform}))
            destinations = [r.run_config["ops"]["run_transfer"]["config"]["destination"]
                            for r in result.run_requests if r.job_name == "transfer"]
            assert sorted(destinations) == sorted(d.name for d in share.destinations if d.is_enabled)
            assert set(json.loads(result.cursor)) <= {d.name for d in share.destinations}
            requested += destinations
            names = {s.name for s in defs.sensors}
            assert ("run_retention" in names) == (index == 0)
    assert seen == every
    assert sorted(requested) == sorted(d.name for d in whole.destinations if d.is_enabled)
    assert "run_retention" in {s.name for s in build_definitions(str(config_path)).sensors}


def test_a_bad_workspace_attribute_is_named(config_path: Path) -> None:
    import transfer_platform.definitions as module

    with pytest.raises(ConfigError, match="defs_shard_3_of_3"):
        module.defs_shard_3_of_3  # noqa: B018
    with pytest.raises(AttributeError):
        module.defs_shard_x  # noqa: B018


def test_evaluate_schedule_in_a_shard_leaves_the_sweep_to_shard_0(config_path: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A transfer queued 7 hours ago is EXPIRED by shard 0's tick only (else every shard's
    sensor would cancel and report it)."""
    import sqlalchemy as sa
    from dagster._core.storage.runs.schema import RunsTable

    monkeypatch.setenv(CONFIG_ENV, str(config_path))
    home = queued_home(tmp_path, run_launcher=MOCKED_LAUNCHER)
    with dg.DagsterInstance.from_config(str(home)) as instance, workspace(instance) as context:
        run = launch(instance, context, "transfer", run_config=transfer_run_config("acme_delta"))
        with instance.run_storage.connect() as conn:
            conn.execute(sa.update(RunsTable).where(RunsTable.c.run_id == run.run_id).values(
                create_timestamp=datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=7)))
        for shard, expired in (("1/2", False), ("0/2", True)):
            platform = TransferPlatformResource(config_path=str(config_path), shard=shard)
            evaluate_schedule(dg.build_sensor_context(instance=instance, resources={"platform": platform}), platform)
            left = instance.get_run_by_id(run.run_id)
            assert (left.status == dg.DagsterRunStatus.CANCELED) == expired, (shard, left.status)
            assert (left.tags.get(EXPIRED_TAG) == "true") == expired


def test_the_sharded_workspace_example_names_every_shard_once() -> None:
    import transfer_platform.definitions as module

    workspace = yaml.safe_load((Path(__file__).parents[2] / "deploy" / "workspace.sharded.yaml").read_text())
    entries = [entry["python_module"] for entry in workspace["load_from"]]
    shards = sorted(parse_shard(e["attribute"].removeprefix("defs_shard_").replace("_of_", "/")) for e in entries
                    if e["module_name"] == "transfer_platform.definitions")
    assert len(shards) == len(entries)
    assert shards == [Shard(i, len(entries)) for i in range(len(entries))]
    assert len({e["location_name"] for e in entries}) == len(entries)
    for entry in entries:  # each attribute is a loadable definitions of the module
        assert isinstance(getattr(module, entry["attribute"]), type(module.defs))


def test_the_code_servers_workspace_example_serves_the_same_shards_on_the_ports_its_commands_use() -> None:
    deploy = Path(__file__).parents[2] / "deploy"
    sharded = yaml.safe_load((deploy / "workspace.sharded.yaml").read_text())["load_from"]
    text = (deploy / "workspace.servers.yaml").read_text()
    servers = [entry["grpc_server"] for entry in yaml.safe_load(text)["load_from"]]
    assert [s["location_name"] for s in servers] == [e["python_module"]["location_name"] for e in sharded]
    assert len({s["port"] for s in servers}) == len(servers)
    # the commands in its comment start shard i on port 400i, named as its entry, and wait for each
    count = len(servers)
    assert f"for i in {' '.join(map(str, range(count)))}; do" in text
    assert f"-a defs_shard_${{i}}_of_{count}" in text
    assert "-p 400$i --location-name transfer_platform_$i" in text
    assert "dagster api grpc-health-check -h 127.0.0.1 -p 400$i" in text
    for i, server in enumerate(servers):
        assert (server["host"], server["port"], server["location_name"]) == ("127.0.0.1", 4000 + i,
                                                                              f"transfer_platform_{i}")
