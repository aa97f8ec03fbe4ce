"""A code location of many recipients builds its definitions and their snapshot without a young
garbage collection every 700 new objects (Python's default): at 1,000 recipients x 10 models those
cost 2-3 of its ~18 CPU-seconds. The collections are counted (``gc.get_stats``), not timed, in a
Python of its own (the threshold stays raised in the process that built the definitions), beside
the same build with Python's default threshold."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from transfer_platform_tests.support.scale import write_scale_config

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
