"""Fixtures of the orchestration tests."""

from transfer_platform_tests.support.postgres import dagster_database  # noqa: F401 - a fixture
