"""The signing key of object-storage destinations (an environment variable): what it must hold,
and reading it. ``validate`` checks it here; ``destinations/manifests.py`` signs with it."""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

KEY_FORMAT = ("the base64 of a 32-byte Ed25519 private key, or a PEM (PKCS#8) Ed25519 private key; "
              "`transfer-platform signing-key` makes one")


def load_signing_key(text: str) -> Ed25519PrivateKey:
    """The private key an environment variable holds; ``ValueError`` saying what is wrong."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    text = text.strip()
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(text.encode(), password=None)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"it is not a readable unencrypted PEM private key ({exc})") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"it is a {type(key).__name__.lstrip('_')}, not an Ed25519 key")
        return key
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("it is neither base64 nor PEM") from None
    if len(raw) != 32:
        raise ValueError(f"it decodes to {len(raw)} bytes, not 32")
    return Ed25519PrivateKey.from_private_bytes(raw)
