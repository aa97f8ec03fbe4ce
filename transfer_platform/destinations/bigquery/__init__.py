"""BigQuery destination: :mod:`.writer` (the SQL writer with BigQuery's load, commit and lock),
:mod:`.dialect` (its GoogleSQL), :mod:`.client` (the client, session and errors), :mod:`.load`
(the CSV a load job reads), :mod:`.probe` (test-connection)."""
