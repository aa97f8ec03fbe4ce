"""A real SFTP server for the tests: ``benchmarks/sftp_server.py``'s sshd (a chrooted, key-only
user restricted to internal-sftp, on a free loopback port), the tests skipped where it cannot run
(not root)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.sftp_server import NEEDS_ROOT, UPLOAD, SFTPServer, keygen
from benchmarks.sftp_server import sftp_server as _sftp_server

__all__ = ["UPLOAD", "SFTPServer", "keygen", "sftp_server"]


@contextmanager
def sftp_server(folder: Path) -> Iterator[SFTPServer]:
    if os.geteuid() != 0:
        import pytest

        pytest.skip(NEEDS_ROOT)
    with _sftp_server(folder) as server:
        yield server
