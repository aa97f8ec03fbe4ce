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
from pathlib import Path

import pytest

from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration import dagster_fixes
from transfer_platform_tests.support.scale import write_scale_config

pytestmark = [pytest.mark.filterwarnings("ignore::dagster.BetaWarning"),
              pytest.mark.filterwarnings("ignore::dagster.PreviewWarning")]

BUILD = textwrap.dedent("""
    import gc, json, sys, warnings
    warnings.simplefilter("ignore")
    from dagster._core.remote_representation.external_data import RepositorySnap
    from transfer_platform import definitions

    if sys.argv[2] == "python's default":
        definitions.GC_YOUNG_THRESHOLD = 700
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
