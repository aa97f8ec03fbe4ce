"""Apache Iceberg destination (pyiceberg, a SQL catalog in PostgreSQL): see :mod:`.writer`."""

from transfer_platform.destinations.iceberg.writer import IcebergWriter

__all__ = ["IcebergWriter"]
