"""Manifests of object-storage transfers: what they hold, how they are signed, how a consumer
verifies one.

A manifest names the Parquet files that one transfer of one model delivered (each with its
SHA-256 and ETag). It is signed with Ed25519 over its ``files`` list, written canonically (JSON,
keys sorted, no spaces, UTF-8): ``signature`` is the base64 signature and
``signature_public_key`` the base64 of the 32-byte public key. A consumer pins the public key the
provider gives it (never the one a manifest carries alone), then, for each manifest:

1. :func:`verify_manifest` (``cryptography`` and the standard library only: copy it if you like):
   the signature is the pinned key's over the files list;
2. reads each ``data_file_key`` (relative to the bucket) and compares its SHA-256 with
   ``sha256_checksum``.

The signing key is an environment variable holding the 32-byte Ed25519 private key in base64, or
a PEM (PKCS#8) private key; ``transfer-platform signing-key`` makes one.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

VERSION = 1
KEY_FORMAT = ("the base64 of a 32-byte Ed25519 private key, or a PEM (PKCS#8) Ed25519 private key; "
              "`transfer-platform signing-key` makes one")


def signed_bytes(files: list[dict[str, Any]]) -> bytes:
    """What the signature covers: the files list as canonical JSON."""
    return json.dumps(files, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def load_signing_key(text: str) -> Ed25519PrivateKey:
    """The private key an environment variable holds; ``ValueError`` saying what is wrong."""
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


def new_signing_key() -> tuple[str, str]:
    """(private key, public key), both base64 of their 32 raw bytes."""
    key = Ed25519PrivateKey.generate()
    return _b64(key.private_bytes_raw()), public_key_text(key)


def public_key_text(key: Ed25519PrivateKey) -> str:
    return _b64(key.public_key().public_bytes_raw())


def sign(manifest: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """``manifest`` with its ``signature`` and ``signature_public_key``."""
    return {**manifest, "signature": _b64(key.sign(signed_bytes(manifest["files"]))),
            "signature_public_key": public_key_text(key)}


def verify_manifest(manifest: dict[str, Any], public_key: str) -> None:
    """Raise ``ValueError`` unless ``manifest`` is signed, over its files list, by the Ed25519 key
    whose raw 32 bytes ``public_key`` holds in base64 (pin it: a forger would put their own key in
    ``signature_public_key``)."""
    if manifest.get("signature_public_key") != public_key:
        raise ValueError("the manifest is signed by another key than the one given")
    try:
        verifier = Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key, validate=True))
        verifier.verify(base64.b64decode(manifest["signature"], validate=True),
                        signed_bytes(manifest["files"]))
    except (InvalidSignature, KeyError, TypeError, binascii.Error, ValueError):
        raise ValueError("the manifest's signature does not match its files list") from None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()
