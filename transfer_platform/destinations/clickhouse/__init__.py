"""The ClickHouse destination: :mod:`.writer` (a window swapped in by one ``EXCHANGE TABLES``, the probe), :mod:`.dialect`, :mod:`.session`."""
