"""Read routes: what each registered source offers and each destination accepts, and the routes
a model of one into the other can take, read from their declarations
(``core/routes.py``, ``transfers/routes.py``)."""

from __future__ import annotations

import pytest

from transfer_platform import vendors
from transfer_platform.core.routes import DELIVERS, Route, Rows, usable
from transfer_platform.destinations.skeleton import Writer

READERS = {name: record.implementation() for name, record in vendors.SOURCES.items()}
WRITERS = {name: record.implementation() for name, record in vendors.DESTINATIONS.items()}


@pytest.mark.parametrize("name", sorted(READERS))
def test_every_source_offers_sparks_reader(name):
    assert Route.SPARK in READERS[name].routes


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_every_destination_accepts_spark_rows_and_arrow(name):
    assert {Rows.SPARK, Rows.ARROW} <= WRITERS[name].accepts


def test_every_route_delivers_some_rows():
    assert set(DELIVERS) == set(Route)
    assert all(DELIVERS[route] for route in Route)


@pytest.mark.parametrize(("source", "destination", "routes"), [
    ("postgres", "postgres", {Route.SPARK, Route.DRIVER, Route.COPY_RELAY}),
    ("postgres", "mysql", {Route.SPARK, Route.DRIVER}),
    ("postgres", "delta", {Route.SPARK, Route.DRIVER}),
    ("mysql", "postgres", {Route.SPARK}),
    ("parquet", "postgres", {Route.SPARK}),
], ids=lambda value: value if isinstance(value, str) else "")
def test_the_routes_of_a_source_into_a_destination(source, destination, routes):
    assert usable(READERS[source].routes, WRITERS[destination].accepts) == routes


def test_a_writer_that_accepts_a_copy_stream_without_writing_one_is_refused():
    with pytest.raises(TypeError, match="accepts a COPY stream but does not implement write_streamed"):
        class HalfWriter(WRITERS["postgres"]):
            write_streamed = Writer.write_streamed
