"""Fixtures of the integration tests (the shared ones are in transfer_platform_tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest


@pytest.fixture
def new_schema(pg_conn: psycopg.Connection) -> Iterator[Callable[[], str]]:
    """A factory of fresh schema names (not created: the destination writer creates them);
    every schema handed out is dropped afterwards."""
    names: list[str] = []

    def make() -> str:
        name = f"tp_dst_{uuid.uuid4().hex[:10]}"
        names.append(name)
        return name

    yield make
    for name in names:
        pg_conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def dst_schema(new_schema: Callable[[], str]) -> str:
    """A fresh destination schema name, dropped after the test."""
    return new_schema()
