"""A Snowflake emulator for the tests: ``benchmarks/snowflake_server.py``'s fakesnow server (its own
process on a free loopback port; databases in memory, one set shared by every connection, kept
while the process lives: a transfer killed with -9 leaves them)."""

from __future__ import annotations

from benchmarks.snowflake_server import ACCOUNT, PASSWORD, USER, FakeSnowflake, fakesnow_server

__all__ = ["ACCOUNT", "PASSWORD", "USER", "FakeSnowflake", "fakesnow_server"]
