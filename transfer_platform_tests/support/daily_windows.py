"""The scenario of a tenant over eight daily windows (1..5 rows a day, none on Jan 6th, 12 on Jan
7th) and a transfer that records how each window was read and written (arrow or staged).
"""

from __future__ import annotations

from datetime import timedelta

from transfer_platform.destinations.base import writer_for
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.runner import TransferRequest, run_transfer
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform_tests.support import sparse_tenant as empty_windows
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.events import day

TENANT, OTHER = "tenant'one", "other"


MIN_START = day(1, 1)


NOW = day(1, 8) + timedelta(hours=5)  # daily windows from Jan 1st: 8 of them, the last in progress


ROWS = ([(100 * d + k, TENANT, day(1, d) + timedelta(hours=k, microseconds=d), f"{100 * d + k}")
         for d in range(1, 6) for k in range(d)]
        + [(700 + k, TENANT, day(1, 7) + timedelta(minutes=k), f"{700 + k}") for k in range(12)])


OTHERS = [(5000 + d, OTHER, day(1, d) + timedelta(hours=3), "x") for d in range(1, 9)]


def config_for(vendor: str, source_schema: str, where, payload_type: str = "string") -> object:
    return empty_windows.config_for(vendor, source_schema, where, tenant=TENANT, payload_type=payload_type, now=NOW)


def holding(outcomes: list) -> list:
    return [o for o in outcomes if any(o.planned.bounds.lower <= r[2] < o.planned.bounds.upper for r in ROWS)]


def run(spark, config, now=NOW, tuning: Tuning = DEFAULT) -> tuple:
    """One transfer, recording each window's outcome and how each read window was written:
    ``("arrow", window)`` read into this process, ``("staged", window)`` read alone and staged (or
    relayed), ``("streamed", window)`` a small window streamed into a PostgreSQL destination."""
    writer = writer_for(config.destination(DESTINATION))
    outcomes, writes = [], []
    write_window, write_arrow = writer.write_window, writer.write_arrow

    def recording(how, write):
        def written(batch, load):
            writes.append((how, load.progress))
            return write(batch, load)
        return written

    writer.write_window, writer.write_arrow = recording("staged", write_window), recording("arrow", write_arrow)
    if hasattr(writer, "write_relayed"):  # a window alone relayed from the source (sources/relay.py)
        write_relayed = writer.write_relayed

        def relayed(relay, spark_, load):
            writes.append(("staged", load.progress))
            return write_relayed(relay, spark_, load)

        writer.write_relayed = relayed
    if hasattr(writer, "write_streamed"):  # a small window streamed by this process
        writer.write_streamed = recording("streamed", writer.write_streamed)
    try:
        (summary,) = run_transfer(
            TransferRequest(spark=spark, config=config, order=TransferOrder(destination=DESTINATION),
                            writer=writer, transfer_id="t1", now=now, tuning=tuning), config.models_for(config.destination(DESTINATION)),
            on_window=lambda model, outcome: outcomes.append(outcome))
    finally:
        writer.close()
    return summary, outcomes, writes
