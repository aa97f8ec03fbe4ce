"""The MySQL / MariaDB destination: :mod:`.dialect` (every statement's text), :mod:`.writer` (the
SQL writer with LOAD DATA, GET_LOCK, the type rules and the rename publish), :mod:`.load` (the
bulk load), :mod:`.probe` (test-connection), :mod:`.errors` (connecting, refusals named with
their grant)."""
