"""A run the ``transfer_schedule`` sensor launched belongs to the tick it was scheduled for, not to
the tick its run happens to start in: source staging shares one read among the transfers of one
tick, and a run that waited in the queue past the next tick must still find its tick's batch."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration.catalog import reporting
from transfer_platform.orchestration.scheduling.run_tags import SCHEDULED_FOR_TAG
from transfer_platform_tests.support.dagster import transfer_run_config
from transfer_platform_tests.support.platform import write_config

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]


class Recorded(Exception):
    pass


@pytest.mark.parametrize(("tags", "expected"), [
    ({SCHEDULED_FOR_TAG: "2026-11-24T10:15:00+00:00"}, datetime(2026, 11, 24, 10, 15, tzinfo=UTC)),
    ({}, None),  # launched by hand: the tick that holds the run's clock (the runner's default)
])
def test_a_transfer_run_belongs_to_its_scheduled_tick(tmp_path: Path, monkeypatch, tags, expected) -> None:
    seen = []

    def recording_transfer(**fields):
        seen.append(fields["order"].tick)
        raise Recorded

    monkeypatch.setattr(reporting, "Transfer", recording_transfer)  # the one transfer call of the op and the asset
    job = build_definitions(str(write_config(tmp_path))).resolve_job_def("transfer")
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(run_config=transfer_run_config("acme_delta"), instance=instance,
                                        tags=tags, raise_on_error=False)
    assert not result.success
    assert seen == [expected]
