"""What a code location of many recipients costs to build, counted rather than timed:

- its definitions and their snapshot are built without a young garbage collection every 700 new
  objects (Python's default; at 1,000 recipients x 10 models those cost 2-3 of ~18 CPU-seconds),
  counted with ``gc.get_stats`` in a Python of its own (the threshold stays raised in the process
  that built the definitions), beside the same build at Python's threshold;
- the asset graph's dependencies are Dagster's own graph, built by ``dagster_fixes``'
  linear-time replacement of Dagster's ``generate_asset_dep_graph`` (quadratic in the assets that
  share a source table: ~2 CPU-seconds at 1,000 x 10 in one location).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration.speed import dagster_fixes
from transfer_platform_tests.support.scale import write_scale_config

pytestmark = [pytest.mark.filterwarnings("ignore::dagster.BetaWarning"),
              pytest.mark.filterwarnings("ignore::dagster.PreviewWarning")]

BUILD = textwrap.dedent("""
    import gc, json, sys, warnings
    warnings.simplefilter("ignore")
    from dagster._core.remote_representation.external_data import RepositorySnap
    from transfer_platform import definitions
    from transfer_platform.orchestration import speed

    if sys.argv[2] == "python's default":
        speed.GC_YOUNG_THRESHOLD = 700
    before = gc.get_stats()[0]["collections"]
    repository = definitions.build_definitions(sys.argv[1], shard="").get_repository_def()
    RepositorySnap.from_def(repository, defer_snapshots=True)
    print(json.dumps(gc.get_stats()[0]["collections"] - before))
""")


def young_collections(config: Path, threshold: str) -> int:
    done = subprocess.run([sys.executable, "-c", BUILD, str(config), threshold], capture_output=True, text=True,
                          timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_building_a_large_code_location_collects_garbage_rarely(tmp_path: Path):
    config = write_scale_config(tmp_path, 100)
    default = young_collections(config, "python's default")
    ours = young_collections(config, "ours")
    assert default > 50, f"the measure does not see the default threshold's collections ({default})"
    assert ours < default / 10, f"{ours} young collections against {default} at Python's default threshold"


def test_the_asset_graph_of_many_recipients_is_dagsters_own_built_in_linear_time(tmp_path: Path):
    from dagster._core.definitions.assets.graph import asset_graph
    from dagster._core.selector import subset_selector

    config_path = write_scale_config(tmp_path, 30)
    repository = build_definitions(str(config_path), shard="").get_repository_def()  # installs the fixes
    assert dagster_fixes.dep_graph_fix_installed(), "Dagster's generate_asset_dep_graph changed: see dagster_fixes"
    fixed = subset_selector.generate_asset_dep_graph
    assert asset_graph.generate_asset_dep_graph is fixed  # the name the asset graph calls, too

    assets = list(repository.asset_graph.assets_defs)
    ours, dagsters = fixed(assets), fixed.original(assets)
    assert ours == dagsters
    for side in ("upstream", "downstream"):
        assert list(ours[side]) == list(dagsters[side])  # the same keys in the same order
    sources = [key for key in ours["downstream"] if key.path[0] == "source"]
    assert len(sources) == 1  # the models' one source table ...
    assert len(ours["downstream"][sources[0]]) == 60  # ... feeds every recipient's asset of both models


@pytest.fixture
def code_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Dagster's code server (``DagsterApiServer``, as ``dagster api grpc`` makes it) serving the
    definitions of 20 recipients, in this process: its answers are called directly."""
    import logging
    import threading

    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.utils import FuturesAwareThreadPoolExecutor
    from dagster._grpc.server import DagsterApiServer

    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(write_scale_config(tmp_path, 20)))
    monkeypatch.delenv("TRANSFER_PLATFORM_SHARD", raising=False)
    stop = threading.Event()
    with FuturesAwareThreadPoolExecutor(max_workers=2) as pool:
        server = DagsterApiServer(stop, logging.getLogger("code_server"), pool, LoadableTargetOrigin(
            executable_path=sys.executable, module_name="transfer_platform.definitions", attribute="defs"))
        try:
            yield server
        finally:
            stop.set()
            server.cleanup()


def repository_request(name: str):
    from dagster import serialize_value
    from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteRepositoryOrigin
    from dagster._grpc.__generated__ import dagster_api_pb2

    origin = RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("transfer_platform"), name)
    return dagster_api_pb2.ExternalRepositoryRequest(
        serialized_repository_python_origin=serialize_value(origin), defer_snapshots=True)


def test_a_code_server_makes_its_repository_snapshot_once_before_anyone_asks(code_server, monkeypatch):
    from dagster import deserialize_value
    from dagster._core.remote_representation.external_data import (
        RepositoryErrorSnap,
        RepositorySnap,
    )

    from transfer_platform.orchestration.speed import dagster_internals

    assert dagster_fixes.snapshot_once_installed(), "Dagster's code server changed: see dagster_fixes"
    (repository,) = dagster_internals.loaded_repositories(code_server).values()
    key = (id(repository), True)
    deadline = time.monotonic() + 120
    while key not in dagster_fixes._snapshots:  # made by the server's own tick, no request yet
        assert time.monotonic() < deadline, "the code server did not make its snapshot ahead"
        time.sleep(0.05)

    made: list[object] = []
    serialize = dagster_internals.serialized_repository_snapshot
    monkeypatch.setattr(dagster_internals, "serialized_repository_snapshot",
                        lambda *args: made.append(args) or serialize(*args))
    request = repository_request(repository.name)
    answers = [code_server._get_serialized_external_repository_data(request) for _ in range(3)]
    assert made == [], "a request made the snapshot again"
    dagsters = type(code_server)._get_serialized_external_repository_data.__wrapped__(code_server, request)
    assert answers == [dagsters] * 3  # the very text Dagster's own answer makes
    assert isinstance(deserialize_value(dagsters), RepositorySnap)
    assert '"r19"' in dagsters

    # a request Dagster answers with an error gets Dagster's error answer, and nothing is kept
    unknown = code_server._get_serialized_external_repository_data(repository_request("no_such_repository"))
    assert isinstance(deserialize_value(unknown), RepositoryErrorSnap)
    assert "no_such_repository" in unknown
    assert [k for k in dagster_fixes._snapshots if k[0] != id(repository)] == []
