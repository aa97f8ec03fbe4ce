"""The runtime, below the command line: the Spark session of a transfer and the shared Spark
server, database connections, the resident command process, and the fork server it shares with
Dagster's run worker."""
