"""The routes one model's windows take, picked once per model, before its first window, from
what its source offers (``SourceReader.routes``) and its destination accepts
(``DestinationWriter.accepts``), as ``transfer_platform/core/routes.py`` names them.

Spark's reader, into any destination (Spark rows for a window moved alone, Arrow for neighbours
read together), is the route every model can take. The others are taken when the source offers
them, the destination accepts what they deliver, ``tuning`` lets them, and the model's read is
proven on the source to need none of Spark's conversions (asked with no row: its columns are
read as they are):

- the driver's own read (``Tuning.direct_reads``): neighbouring windows read by the source's
  driver into Arrow, their rows counted on the same connection, no Spark job;
- the binary COPY relay (``Tuning.relay_windows``, a destination that accepts a COPY stream): a
  window of a source table holding each key once goes as a COPY stream, never decoded on the
  way: relayed by Spark's tasks when moved alone, streamed by this process when small and the
  driver reads it.

A staged batch (``sources/shared_reads.py``) is read from the staging: no route but Spark's.
"""

from __future__ import annotations

from dataclasses import dataclass

from transfer_platform.core.routes import Route, usable
from transfer_platform.destinations.base import DestinationWriter
from transfer_platform.sources.base import DriverReads, ReadRequest, SourceReader
from transfer_platform.tuning import Tuning


@dataclass(frozen=True)
class ModelRoutes:
    """What one model's windows are moved by, besides Spark's reader."""

    #: the source's driver, the model's read proven on it (it then stands for
    #: ``SourceReader.check_read``), held until :meth:`close`; ``None``: no route but Spark's
    proven: DriverReads | None = None
    #: neighbouring windows are read by the driver (:attr:`Route.DRIVER`)
    driver: bool = False
    #: a window of unique keys goes as a COPY stream (:attr:`Route.COPY_RELAY`)
    copy: bool = False

    @property
    def direct(self) -> DriverReads | None:
        """The driver reads of neighbouring windows, if that route is taken."""
        return self.proven if self.driver else None

    @property
    def streams(self) -> bool:
        """A small window read alone is streamed as a COPY stream by this process (the driver
        reads it, the destination takes the stream)."""
        return self.driver and self.copy

    def close(self) -> None:
        if self.proven is not None:
            self.proven.close()


def routes_for(reader: SourceReader, writer: DestinationWriter, proof: ReadRequest, tuning: Tuning, *,
               staged: bool) -> ModelRoutes:
    """The routes of ``proof``'s model from ``reader``'s source into ``writer``'s destination
    (see the module): the driver's proof asked only if a route it opens would be taken."""
    if staged:
        return ModelRoutes()
    routes = usable(reader.routes, writer.accepts)
    driver = tuning.direct_reads and Route.DRIVER in routes
    copy = tuning.relay_windows and Route.COPY_RELAY in routes
    if not (driver or copy):
        return ModelRoutes()
    proven = reader.driver_reads(proof)
    if proven is None:
        return ModelRoutes()
    return ModelRoutes(proven, driver=driver, copy=copy)
