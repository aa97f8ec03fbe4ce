"""The signature of a delivery (pure): HMAC-SHA256 of ``<timestamp>.<body>`` with the webhook's
secret, sent as ``X-Transfer-Platform-Signature: sha256=<hex>``. A receiver verifies it with
:func:`verify` (or the same five lines in its own language)."""

from __future__ import annotations

import hashlib
import hmac
import secrets

PREFIX = "sha256="
SECRET_PREFIX = "whsec_"
#: a signature older (or newer) than this is refused by :func:`verify` (a replayed request)
TOLERANCE_SECONDS = 300


def new_secret() -> str:
    """A signing secret: 256 random bits."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return PREFIX + digest


def verify(secret: str, timestamp: str, body: bytes, header: str, now: float,
           tolerance: int = TOLERANCE_SECONDS) -> bool:
    """Whether ``header`` (the signature header received) signs ``body`` (the raw bytes received)
    at ``timestamp`` (the timestamp header), and the timestamp is within ``tolerance`` of ``now``."""
    try:
        moment = int(timestamp)
    except ValueError:
        return False
    if abs(now - moment) > tolerance:
        return False
    return hmac.compare_digest(signature(secret, moment, body), header)
