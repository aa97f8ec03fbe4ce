"""The DuckDB destination: :mod:`.writer` (the database file held, windows staged in place), :mod:`.dialect`, :mod:`.probe`."""
