"""The MySQL / MariaDB destination: :mod:`.dialect` (its SQL text), :mod:`.load` (the bulk load), :mod:`.writer`."""
