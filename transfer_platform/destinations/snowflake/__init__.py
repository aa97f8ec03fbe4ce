"""The Snowflake destination: :mod:`.dialect` (every statement's text), :mod:`.connect` (the
connector's session, its errors named with their fix), :mod:`.writer` (the SQL writer with the
stage, PUT and COPY INTO, the lock row, the publish of a refresh as DML), :mod:`.probe`
(test-connection)."""
