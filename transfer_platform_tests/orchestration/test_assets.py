"""The Dagster side against a real instance: partitions, per-window progress, lineage, IO manager.

Source: a small Parquet lake; destination: Delta on local disk; real Spark; real Dagster
(``instance_for_test`` + ``materialize``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable

from transfer_platform.definitions import build_definitions
from transfer_platform.destinations.delta import read_state

pytestmark = pytest.mark.integration

DAY0 = datetime(2025, 3, 3, tzinfo=UTC)  # a Monday
TENANT = "org-'a'"
OTHER = "org-b"
TS = pa.timestamp("us", tz="UTC")


def _rows(days: int = 5, per_day: int = 4) -> list[dict]:
    rows, key = [], 0
    for day in range(days):
        for i in range(per_day):
            for tenant in (TENANT, OTHER):
                key += 1
                stamp = DAY0 + timedelta(days=day, hours=3 * i, microseconds=123_456 + key)
                rows.append({"id": key, "organization_id": tenant, "updated_at": stamp, "v": f"r{key}"})
    return rows


def _write_lake(root: Path, rows: list[dict]) -> None:
    folder = root / "items"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.parquet"):
        old.unlink()
    schema = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", TS), ("v", pa.string())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / "part-0.parquet")


def _config(tmp_path: Path, *, window: int | None = 86_400) -> Path:
    columns = [
        {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
        {"name_in_source": "organization_id", "data_type": "string"},
        {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
        {"name_in_source": "v", "data_type": "string"},
    ]
    model = {"model_name": "items", "source_name": "lake", "source_table": "items",
             "organization_column": "organization_id", "columns": columns,
             "min_start_time_epoch": int(DAY0.timestamp()) + 3_600 * 2}  # mid-window start
    if window:
        model["max_transfer_time_window_seconds"] = window
    config = {
        "sources": [{"name": "lake", "vendor": "parquet", "connection": {"path": "lake"},
                     "lookback_window": 0}],
        "models": [model],
        "recipients": [{"name": "acme", "id_in_provider_system": TENANT}],
        "destinations": [{"name": "acme_delta", "recipient": "acme", "vendor": "delta",
                          "connection": {"path": "dest"}}],
        "spark": {"master": "local[2]", "driver_memory": "1g"},
    }
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _delivered(tmp_path: Path) -> list[dict]:
    table = DeltaTable(str(tmp_path / "dest" / "items")).to_pyarrow_table()
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def _expected(rows: list[dict], until: datetime | None = None) -> list[dict]:
    start = DAY0 + timedelta(hours=2)
    return sorted(
        (r for r in rows if r["organization_id"] == TENANT and r["updated_at"] >= start
         and (until is None or r["updated_at"] < until)),
        key=lambda r: r["id"],
    )


KEY = dg.AssetKey(["acme", "acme_delta", "items"])


def _materialize(defs: dg.Definitions, instance, **kwargs) -> dg.ExecuteInProcessResult:
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(instance=instance, asset_selection=[KEY], raise_on_error=False, **kwargs)


def _range_tags(first: str, last: str) -> dict[str, str]:
    return {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}


def test_asset_graph_keys_groups_partitions_and_lineage(tmp_path: Path, spark) -> None:
    _write_lake(tmp_path / "lake", _rows())
    defs = build_definitions(str(_config(tmp_path)))
    graph = defs.resolve_asset_graph()
    node = graph.get(KEY)
    assert node.group_name == "acme_delta"  # a group per destination
    assert dg.AssetKey(["source", "lake", "items"]) in node.parent_keys
    partitions = node.partitions_def
    assert isinstance(partitions, dg.TimeWindowPartitionsDefinition)
    assert partitions.cron_schedule == "0 0 * * *"
    # the grid starts at the tick at or before the configured start (02:00 on DAY0)
    assert partitions.get_first_partition_key() == DAY0.strftime("%Y-%m-%d")
    # the window in progress is included (end_offset=1)
    now = datetime.now(UTC)
    assert partitions.get_last_partition_key() == now.strftime("%Y-%m-%d")


def test_single_run_range_commits_and_reports_each_window(tmp_path: Path, spark) -> None:
    rows = _rows()
    _write_lake(tmp_path / "lake", rows)
    defs = build_definitions(str(_config(tmp_path)))
    keys = [(DAY0 + timedelta(days=d)).strftime("%Y-%m-%d") for d in range(5)]
    with dg.instance_for_test() as instance:
        result = _materialize(defs, instance, tags=_range_tags(keys[0], keys[-1]))
        assert result.success
        events = result.asset_materializations_for_node("transfer__acme_delta")
        assert [e.partition for e in events] == keys  # exactly one event per window, in order
        assert sum(e.metadata["rows_transferred"].value for e in events) == len(_expected(rows))
        assert instance.get_materialized_partitions(KEY) == set(keys)
    assert _delivered(tmp_path) == _expected(rows)
    state = read_state(DeltaTable(str(tmp_path / "dest" / "items")))
    assert state.watermark == DAY0 + timedelta(days=5)


def test_failure_in_window_three_keeps_windows_one_and_two(tmp_path: Path, spark) -> None:
    rows = _rows()
    bad_day = DAY0 + timedelta(days=2, hours=5)
    rows.append({"id": 1_000, "organization_id": TENANT, "updated_at": bad_day, "v": "dup-1"})
    rows.append({"id": 1_000, "organization_id": TENANT, "updated_at": bad_day, "v": "dup-2"})
    _write_lake(tmp_path / "lake", rows)
    defs = build_definitions(str(_config(tmp_path)))
    keys = [(DAY0 + timedelta(days=d)).strftime("%Y-%m-%d") for d in range(5)]
    with dg.instance_for_test() as instance:
        result = _materialize(defs, instance, tags=_range_tags(keys[0], keys[-1]))
        assert not result.success
        assert instance.get_materialized_partitions(KEY) == set(keys[:2])
        failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
        message = failure.event_specific_data.user_failure_data.description
        assert "two different versions of key" in message
        assert "id=1000" in message
        assert "acme_delta" in message
        assert _delivered(tmp_path) == _expected(rows, until=DAY0 + timedelta(days=2))
        state = read_state(DeltaTable(str(tmp_path / "dest" / "items")))
        assert state.watermark == DAY0 + timedelta(days=2)

        # fix the source and retry the failed windows only
        _write_lake(tmp_path / "lake", [r for r in rows if r["v"] != "dup-2"])
        retry = _materialize(defs, instance, tags=_range_tags(keys[2], keys[-1]))
        assert retry.success
        assert instance.get_materialized_partitions(KEY) == set(keys)
    assert _delivered(tmp_path) == _expected([r for r in rows if r["v"] != "dup-2"])


def test_model_without_window_is_an_unpartitioned_asset(tmp_path: Path, spark) -> None:
    rows = _rows()
    _write_lake(tmp_path / "lake", rows)
    defs = build_definitions(str(_config(tmp_path, window=None)))
    assert defs.resolve_asset_graph().get(KEY).partitions_def is None
    with dg.instance_for_test() as instance:
        result = _materialize(defs, instance)
        assert result.success
        events = result.asset_materializations_for_node("transfer__acme_delta")
        assert len(events) == 1
        assert events[0].partition is None
        assert events[0].metadata["rows_transferred"].value == len(_expected(rows))
    assert _delivered(tmp_path) == _expected(rows)


def test_io_manager_loads_the_delivered_table_for_downstream_assets(tmp_path: Path, spark) -> None:
    rows = _rows(days=2)
    _write_lake(tmp_path / "lake", rows)
    base = build_definitions(str(_config(tmp_path, window=None)))

    @dg.asset(ins={"items": dg.AssetIn(key=KEY)})
    def item_count(items) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={"count": items.count(), "columns": ",".join(items.columns)})

    defs = dg.Definitions(assets=[*base.assets, item_count], resources=base.resources,
                          executor=dg.in_process_executor)
    with dg.instance_for_test() as instance:
        job = defs.resolve_implicit_global_asset_job_def()
        assert job.execute_in_process(instance=instance, asset_selection=[KEY]).success
        # a later run: the input is read back from the destination by the IO manager
        result = job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey("item_count")])
        assert result.success
        event = result.asset_materializations_for_node("item_count")[0]
        assert event.metadata["count"].value == len(_expected(rows))
        assert event.metadata["columns"].value == "id,organization_id,updated_at,v"


def test_io_manager_upserts_a_returned_dataframe(tmp_path: Path, spark) -> None:
    rows = _rows(days=1)
    _write_lake(tmp_path / "lake", rows)
    base = build_definitions(str(_config(tmp_path, window=None)))
    first, second = (r["id"] for r in _expected(rows)[:2])
    newer = DAY0 + timedelta(days=1, hours=1)

    @dg.asset(metadata={"destination": "acme_delta", "model": "items"})
    def corrections():
        from pyspark.sql import Row

        return spark.createDataFrame([
            Row(id=first, organization_id=TENANT, updated_at=newer, v="corrected"),
            Row(id=second, organization_id=TENANT, updated_at=DAY0 - timedelta(days=30), v="stale"),
        ]).selectExpr("cast(id as bigint) id", "organization_id", "updated_at", "v")

    defs = dg.Definitions(assets=[*base.assets, corrections], resources=base.resources,
                          executor=dg.in_process_executor)
    with dg.instance_for_test() as instance:
        job = defs.resolve_implicit_global_asset_job_def()
        assert job.execute_in_process(instance=instance, asset_selection=[KEY]).success
        assert job.execute_in_process(instance=instance,
                                      asset_selection=[dg.AssetKey("corrections")]).success
    by_id = {r["id"]: r for r in _delivered(tmp_path)}
    assert by_id[first]["v"] == "corrected"  # a newer version replaces the row
    assert by_id[second]["v"] == next(r["v"] for r in rows if r["id"] == second)  # an older one never does
    assert len(by_id) == len(_expected(rows))


def test_definitions_follow_the_config_environment_variable(tmp_path: Path, monkeypatch) -> None:
    _write_lake(tmp_path / "lake", _rows(days=1))
    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(_config(tmp_path)))
    monkeypatch.chdir(tmp_path.parent)
    defs = build_definitions()
    assert KEY in {a.key for a in defs.resolve_asset_graph().asset_nodes}


def test_a_models_description_leads_its_assets_description(tmp_path: Path) -> None:
    path = _config(tmp_path)
    assert build_definitions(str(path)).resolve_asset_graph().get(KEY).description.startswith(
        "items: rows of tenant")  # no description: the model's name
    raw = yaml.safe_load(path.read_text())
    raw["models"][0]["description"] = "Items sold, one row per item"
    path.write_text(yaml.safe_dump(raw))
    description = build_definitions(str(path)).resolve_asset_graph().get(KEY).description
    assert description.startswith("Items sold, one row per item: rows of tenant 'org-'a'' delivered"), description


def test_full_refresh_from_run_config_rebuilds_every_window(tmp_path: Path, spark) -> None:
    """Launched on one partition with ``full_refresh: true`` in the launchpad's run config, the
    refresh rebuilds the whole configured range aside, swaps it in and reports every window."""
    now = datetime.now(UTC)
    start = now - timedelta(days=20)
    rows = [{"id": i, "organization_id": TENANT if i % 2 else OTHER,
             "updated_at": start + timedelta(hours=7 * i, microseconds=i), "v": f"r{i}"} for i in range(60)]
    rows = [r for r in rows if r["updated_at"] < now - timedelta(minutes=5)]
    _write_lake(tmp_path / "lake", rows)
    path = _config(tmp_path, window=604_800)
    config = yaml.safe_load(path.read_text())
    config["models"][0]["min_start_time_epoch"] = int(start.timestamp())
    path.write_text(yaml.safe_dump(config))
    defs = build_definitions(str(path))
    partitions = defs.resolve_asset_graph().get(KEY).partitions_def
    keys = partitions.get_partition_keys()
    with dg.instance_for_test() as instance:
        first = _materialize(defs, instance, partition_key=keys[-1])  # only the latest week
        assert first.success
        assert len(_delivered(tmp_path)) < len([r for r in rows if r["organization_id"] == TENANT])

        refresh = _materialize(defs, instance, partition_key=keys[-1],
                               run_config={"ops": {"transfer__acme_delta": {"config": {"full_refresh": True}}}})

        assert refresh.success
        events = refresh.asset_materializations_for_node("transfer__acme_delta")
        assert [e.partition for e in events] == keys
        assert all(e.metadata["full_refresh"].value for e in events)
        assert instance.get_materialized_partitions(KEY) == set(keys)
    expected = sorted((r for r in rows if r["organization_id"] == TENANT and r["updated_at"] >= start),
                      key=lambda r: r["id"])
    assert _delivered(tmp_path) == expected


def _two_model_config(tmp_path: Path) -> Path:
    """``twins`` and ``items`` (same daily grid, hence one op; twins first) and ``weekly`` (its
    own op)."""
    path = _config(tmp_path)
    config = yaml.safe_load(path.read_text())
    items = config["models"][0]
    config["models"] = [{**items, "model_name": "twins", "source_table": "twins"}, items,
                        {**items, "model_name": "weekly", "max_transfer_time_window_seconds": 604_800}]
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_models_of_a_destination_share_an_op_and_move_only_when_selected(tmp_path: Path, spark) -> None:
    rows = _rows(days=2)
    _write_lake(tmp_path / "lake", rows)
    defs = build_definitions(str(_two_model_config(tmp_path)))
    twins, weekly = dg.AssetKey(["acme", "acme_delta", "twins"]), dg.AssetKey(["acme", "acme_delta", "weekly"])
    graph = defs.resolve_asset_graph()
    assert graph.get(twins).partitions_def == graph.get(KEY).partitions_def
    assert graph.get(weekly).partitions_def.cron_schedule == "0 0 * * 1"
    ops = {key: graph.get(key).assets_def.op.name for key in (KEY, twins, weekly)}
    assert ops == {KEY: "transfer__acme_delta", twins: "transfer__acme_delta",
                   weekly: "transfer__acme_delta__1"}
    assert graph.get(twins).group_name == "acme_delta"
    assert dg.AssetKey(["source", "lake", "twins"]) in graph.get(twins).parent_keys
    keys = [(DAY0 + timedelta(days=d)).strftime("%Y-%m-%d") for d in range(2)]
    with dg.instance_for_test() as instance:
        result = _materialize(defs, instance, tags=_range_tags(keys[0], keys[-1]))  # items only

        assert result.success
        assert {e.asset_key for e in result.asset_materializations_for_node("transfer__acme_delta")} == {KEY}
        assert instance.get_materialized_partitions(twins) == set()
        assert not (tmp_path / "dest" / "twins").exists()  # its table was never touched
    assert _delivered(tmp_path) == _expected(rows)


def test_a_failing_model_does_not_stop_the_other_models_of_its_op(tmp_path: Path, spark) -> None:
    rows = _rows(days=2)
    _write_lake(tmp_path / "lake", rows)
    twin_rows = [*rows, {**_expected(rows)[0], "v": "duplicate"}]  # the same key twice
    folder = tmp_path / "lake" / "twins"
    folder.mkdir()
    schema = pq.read_schema(tmp_path / "lake" / "items" / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist(twin_rows, schema=schema), folder / "part-0.parquet")
    defs = build_definitions(str(_two_model_config(tmp_path)))
    twins = dg.AssetKey(["acme", "acme_delta", "twins"])
    keys = [(DAY0 + timedelta(days=d)).strftime("%Y-%m-%d") for d in range(2)]
    with dg.instance_for_test() as instance:
        job = defs.resolve_implicit_global_asset_job_def()
        result = job.execute_in_process(instance=instance, asset_selection=[twins, KEY], raise_on_error=False,
                                        tags=_range_tags(keys[0], keys[-1]))

        assert not result.success
        assert instance.get_materialized_partitions(KEY) == set(keys)  # items moved after twins failed
        assert instance.get_materialized_partitions(twins) == set()
        failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
        message = failure.event_specific_data.user_failure_data.description
        assert "two different versions of key" in message
        assert failure.event_specific_data.user_failure_data.metadata["model"].value == "twins"
    assert _delivered(tmp_path) == _expected(rows)


def test_op_names_stay_unique_when_a_destination_name_looks_like_a_second_op(tmp_path: Path) -> None:
    path = _two_model_config(tmp_path)
    config = yaml.safe_load(path.read_text())
    config["recipients"].append({"name": "globex", "id_in_provider_system": OTHER})
    config["destinations"].append({"name": "acme_delta__1", "recipient": "globex", "vendor": "delta",
                                   "connection": {"path": "dest2"}})
    path.write_text(yaml.safe_dump(config))
    graph = build_definitions(str(path)).resolve_asset_graph()
    names = {graph.get(dg.AssetKey([recipient, destination, model])).assets_def.op.name
             for recipient, destination in (("acme", "acme_delta"), ("globex", "acme_delta__1"))
             for model in ("twins", "weekly")}
    assert names == {"transfer__acme_delta", "transfer__acme_delta__1", "transfer__acme_delta__1_",
                     "transfer__acme_delta__1__1"}
