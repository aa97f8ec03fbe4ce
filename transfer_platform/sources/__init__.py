"""Sources: build the Spark read of one window of one tenant's rows for a model."""

from transfer_platform.sources.base import ReadRequest, SourceReader, reader_for

__all__ = ["ReadRequest", "SourceReader", "reader_for"]
