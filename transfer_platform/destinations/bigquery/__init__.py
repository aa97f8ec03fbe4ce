"""BigQuery destination: :mod:`.writer`, :mod:`.dialect` (its GoogleSQL), :mod:`.client` (the client,
session and errors), :mod:`.load` (the CSV a load job reads)."""
