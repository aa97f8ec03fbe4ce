"""The ways a window's rows can go from a source to a destination, named once for both sides.

A source reader declares the :class:`Route` values it offers (``SourceReader.routes``), a
destination writer the :class:`Rows` it accepts (``DestinationWriter.accepts``); a transfer
matches the two once per model (``transfer_platform/transfers/routes.py``), so a new way of
reading (a warehouse's Arrow export, say) is a new member here and a declaration on each side
that has it, not a branch on a vendor in the runner.
"""

from __future__ import annotations

from enum import StrEnum


class Rows(StrEnum):
    """The form a window's rows reach a destination in: what a writer accepts."""

    #: a Spark DataFrame, staged by Spark's executors (``write_window``): every writer
    SPARK = "Spark rows"
    #: Arrow batches in the transfer's process (``write_arrow``): every writer
    ARROW = "Arrow"
    #: a binary COPY stream, each value already of the destination column's type
    #: (``write_relayed`` from Spark's tasks, ``write_streamed`` from this process)
    COPY_STREAM = "a COPY stream"


class Route(StrEnum):
    """A way a source reads a window: what a reader offers."""

    #: Spark's reader (JDBC, a Parquet scan): Spark rows, or Arrow after one Spark job for
    #: neighbouring windows read together; every reader
    SPARK = "Spark's reader"
    #: the database's own driver, without a Spark job: small windows into Arrow, their rows
    #: counted on the same connection; taken for a model whose columns it reads as they are
    DRIVER = "the driver's own read"
    #: the window in binary COPY format, never decoded on the way: relayed by Spark's tasks (a
    #: window moved alone), streamed by this process (a small one the driver reads alone);
    #: taken with :attr:`DRIVER`'s proof, for a source table holding each key once
    COPY_RELAY = "the binary COPY relay"


#: the forms of rows each route delivers
DELIVERS: dict[Route, frozenset[Rows]] = {
    Route.SPARK: frozenset({Rows.SPARK, Rows.ARROW}),
    Route.DRIVER: frozenset({Rows.ARROW}),
    Route.COPY_RELAY: frozenset({Rows.COPY_STREAM}),
}


def usable(offered: frozenset[Route], accepted: frozenset[Rows]) -> frozenset[Route]:
    """The routes of ``offered`` that deliver a form of rows the destination ``accepted``."""
    return frozenset(route for route in offered if DELIVERS[route] & accepted)
