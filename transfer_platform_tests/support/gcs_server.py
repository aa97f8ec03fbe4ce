"""A real Google Cloud Storage emulator for the tests: ``benchmarks/gcs_server.py``'s
fake-gcs-server (in memory, its own process on a free loopback port; it checks no credentials and
enforces no IAM)."""

from __future__ import annotations

from benchmarks.gcs_server import GcsServer, binary, gcs_server

__all__ = ["GcsServer", "binary", "gcs_server"]
