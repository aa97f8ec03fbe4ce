"""Moved to ``destinations/postgres/sql.py``; this name stays for the imports that still use it."""

from transfer_platform.destinations.postgres.sql import *  # noqa: F403
