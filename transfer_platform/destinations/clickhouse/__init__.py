"""The ClickHouse destination: :mod:`.dialect` (every statement's text), :mod:`.session` (the
clickhouse-connect client, its connection and errors), :mod:`.writer` (the SQL writer whose window
is swapped in by one ``EXCHANGE TABLES``), :mod:`.probe` (test-connection)."""
