"""A Spark Connect server's address as the configuration writes it (``spark.remote``,
``$TRANSFER_PLATFORM_SPARK_REMOTE``): parsed here, where the configuration is checked, and used by
``runtime/spark_session.py`` to connect."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_CONNECT_PORT = 15002


@dataclass(frozen=True)
class Endpoint:
    """A Spark Connect server's address."""

    host: str
    port: int

    @property
    def url(self) -> str:
        return f"sc://{self.host}:{self.port}"


def parse_endpoint(url: str) -> Endpoint:
    """``sc://host:port`` (the port defaults to 15002); a ``ValueError`` saying what to write."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme != "sc" or not parts.hostname or port == -1 or parts.path not in ("", "/") \
            or parts.query or parts.username or parts.password:
        raise ValueError(f"a Spark Connect endpoint is written sc://host:port (for example "
                         f"sc://127.0.0.1:{DEFAULT_CONNECT_PORT}), not {url!r}")
    return Endpoint(parts.hostname, port or DEFAULT_CONNECT_PORT)
