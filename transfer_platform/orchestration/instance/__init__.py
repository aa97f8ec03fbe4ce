"""Dagster's instance: the shipped ``dagster.yaml``'s SQLite storage, created and migrated under a
lock, and the retention of old runs."""
