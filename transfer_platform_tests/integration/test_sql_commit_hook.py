"""The one hook of a SQL destination's commit (``SqlWriter._atomically``): every window's rows, soft
deletes and new state go through it, and what it refuses is not visible. An engine without
multi-statement transactions makes its window visible at once there and nowhere else; here a
PostgreSQL writer whose hook refuses at the very end stands in for such an engine failing to
publish, against the real database."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

import pytest

from transfer_platform.destinations.postgres import PostgresWriter
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.runner import TransferRequest, run_transfer
from transfer_platform_tests.support.config import DESTINATION, pg_config
from transfer_platform_tests.support.events import (
    create_events,
    day,
    insert_rows,
    make_rows,
    source_rows,
)
from transfer_platform_tests.support.postgres import destination_rows, status_row

pytestmark = pytest.mark.integration

TENANT = "acme"


class PublishingWriter(PostgresWriter):
    """A vendor that says in ``_atomically`` how its window becomes visible: the base's one
    transaction, then a last step that may refuse (``refuse``)."""

    refuse = False
    commits: list

    @contextmanager
    def _atomically(self, load=None):
        with super()._atomically(load):
            yield
            self.commits.append(load)
            if self.refuse:
                raise RuntimeError("the engine refused to make the window visible")


def run(spark, config, now, writer):
    try:
        (summary,) = run_transfer(TransferRequest(spark=spark, config=config, order=TransferOrder(destination=DESTINATION),
                                                  writer=writer, transfer_id=f"t{now:%d}", now=now),
                                  config.models_for(config.destination(DESTINATION)))
    finally:
        writer.close()
    return summary


def test_every_window_commits_through_the_hook_and_a_refusal_there_changes_nothing(
        spark, pg_conn, pg_schema, dst_schema):
    days = [day(3, 1), day(3, 2), day(3, 3)]
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "globex"], 20, days, seed=3))
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=day(3, 1))

    writer = PublishingWriter(config.destination(DESTINATION))
    writer.commits = []
    first = run(spark, config, day(3, 4), writer)

    assert first.status == "SUCCESS"
    assert len(writer.commits) == first.windows == 3  # one commit per daily window, each through the hook
    assert len({load.progress for load in writer.commits}) == 3  # three windows, not one thrice
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    delivered, status = destination_rows(pg_conn, dst_schema), status_row(pg_conn, dst_schema)

    changed = day(3, 4) + timedelta(hours=1)
    pg_conn.execute(f'UPDATE "{pg_schema}".events SET payload = %s, updated_at = %s WHERE organization_id = %s',
                    ("changed", changed, TENANT))
    refusing = PublishingWriter(config.destination(DESTINATION))
    refusing.commits, refusing.refuse = [], True
    with pytest.raises(RuntimeError, match="refused to make the window visible"):
        run(spark, config, day(3, 5), refusing)

    assert refusing.commits  # the window reached the hook ...
    assert destination_rows(pg_conn, dst_schema) == delivered  # ... and none of its rows is visible
    assert status_row(pg_conn, dst_schema) == status  # nor its watermark
