"""A BigQuery emulator for the tests: ``benchmarks/bigquery_server.py``'s crucible-emulator (DuckDB
underneath; its own venv, ``scripts/crucible/.venv``, made by ``scripts/dev setup``), its own
process on a free loopback port, talked to over its REST API with anonymous credentials."""

from __future__ import annotations

from benchmarks.bigquery_server import CRUCIBLE, PROJECT, BigqueryServer, bigquery_server

__all__ = ["CRUCIBLE", "PROJECT", "BigqueryServer", "bigquery_server"]
