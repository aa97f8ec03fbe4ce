"""Manifests of object-storage transfers: what they hold, how they are signed, the order a consumer
applies them in.

A manifest names the Parquet files that one transfer of one model delivered (each with its
SHA-256 and ETag). It is signed with Ed25519 over its ``files`` list, written canonically (JSON,
keys sorted, no spaces, UTF-8): ``signature`` is the base64 signature and
``signature_public_key`` the base64 of the 32-byte public key. A consumer pins the public key the
provider gives it (never the one a manifest carries alone), then, for each manifest:

1. :func:`verify_manifest` (``cryptography`` and the standard library only: copy it if you like):
   the signature is the pinned key's over the files list;
2. reads each ``data_file_key`` (relative to the bucket) and compares its SHA-256 with
   ``sha256_checksum``.

Version 2 (:data:`VERSION`): ``start_time`` and ``end_time`` are when the transfer started and
when its part for this model ended (UTC), ``window_start`` and ``window_end`` the range of
last-modified values its windows covered, ``model_id`` :func:`model_id` of the model's name, and
``sequence`` the order a consumer applies a model's manifests in (:func:`application_order`).
Version 1 had no ``sequence`` or window fields; its ``start_time`` and ``end_time`` were its
windows' range.

The signing key is an environment variable holding the 32-byte Ed25519 private key in base64, or
a PEM (PKCS#8) private key; ``transfer-platform signing-key`` makes one.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

VERSION = 2
#: ``model_id`` is ``uuid5(NAMESPACE_URL, MODEL_ID_PREFIX + model_name)``
MODEL_ID_PREFIX = "transfer-platform:model:"
FULL_REFRESH = "FULL_REFRESH"


def signed_bytes(files: list[dict[str, Any]]) -> bytes:
    """What the signature covers: the files list as canonical JSON."""
    return json.dumps(files, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def model_id(model_name: str) -> str:
    """A model's stable UUID: the same name gives the same id, on any machine, in any release."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, MODEL_ID_PREFIX + model_name))


def application_order(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifests of one model a consumer applies, in the order it applies them: from the last
    FULL_REFRESH on (it starts by discarding every row held), by ``sequence``. A version 1
    manifest has none: those come before every version 2 one, by generation, the FULL_REFRESH of
    a generation first, then by ``end_time``."""
    def place(manifest: dict[str, Any]) -> tuple:
        if manifest.get("version", 1) >= 2:
            return (1, manifest["sequence"])
        return (0, manifest.get("generation", 0), manifest["transfer_type"] != FULL_REFRESH, manifest["end_time"])

    ordered = sorted(manifests, key=place)
    refreshes = [i for i, manifest in enumerate(ordered) if manifest["transfer_type"] == FULL_REFRESH]
    return ordered[refreshes[-1]:] if refreshes else ordered


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
