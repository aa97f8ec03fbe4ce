"""The failed-credentials limiter counts by the TCP peer's address, as ``transfer-platform api``
serves it (a real server process, over HTTP): a client at 429 that sends another
``X-Forwarded-For`` with each request is still at 429 (the header is the client's to write)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from transfer_platform.config.secrets import SECRET_KEY_ENV
from transfer_platform_tests.support.api import write_api_config
from transfer_platform_tests.support.daemon import VENV_BIN
from transfer_platform_tests.support.processes import listening

ALLOWED = 3  # wrong credentials a minute before 429


def test_rotating_x_forwarded_for_does_not_reset_the_limit(tmp_path: Path, store_schema: str,
                                                            secret_key: str) -> None:
    config = write_api_config(tmp_path, store_schema, api={"failed_credentials_per_minute": ALLOWED})
    command = [str(VENV_BIN / "transfer-platform"), "--config", str(config), "api", "--port", "{port}"]
    env = {**os.environ, SECRET_KEY_ENV: secret_key}
    with listening("transfer-platform api", command, tmp_path / "api.log", env=env) as port, \
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        wrong = {"X-API-KEY": "tpk_wrong"}
        statuses = [client.get("/recipients", headers={**wrong, "X-Forwarded-For": "203.0.113.1"}).status_code
                    for _ in range(ALLOWED + 1)]
        assert statuses == [401] * ALLOWED + [429], statuses
        for n in range(2, 12):  # another forwarded address each time: the peer is the same
            answer = client.get("/recipients", headers={**wrong, "X-Forwarded-For": f"203.0.113.{n}"})
            assert answer.status_code == 429, (n, answer.text)
            assert answer.json()["message"].startswith("too many wrong credentials from 127.0.0.1: ")
