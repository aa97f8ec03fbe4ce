"""Fixtures of the orchestration tests."""

from transfer_platform_tests.support.postgres import dagster_database, statements  # noqa: F401 - fixtures
