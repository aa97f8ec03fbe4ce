"""The contract suite's Google Cloud Storage destination (vendor ``gcs``) in the session's
fake-gcs-server, and its reader: the recipient's own google-cloud-storage client applying the
manifests (``destinations._consumed``), not the writer's store."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transfer_platform_tests.support.destinations import Place, TestDestination


def gcs_bucket(place: Place):
    """The session's emulator and a fresh bucket in it (its client, and the bucket's name)."""
    server = place.fixture("gcs_server")
    name = f"contract-{uuid.uuid4().hex[:12]}"
    server.create_bucket(name)
    return server, name


def gcs_reader(server, bucket: str, prefix: str):
    """``(keys, get)`` over the bucket through google-cloud-storage."""
    client = server.client()

    def keys(start: str) -> list[str]:
        return sorted(b.name for b in client.list_blobs(bucket, prefix=start))

    def get(key: str) -> bytes:
        return client.bucket(bucket).blob(key).download_as_bytes()

    return keys, get


def gcs(place: Place) -> TestDestination:
    from transfer_platform_tests.support.destinations import (
        SIGNING_KEY_ENV,
        TestDestination,
        _consumed,
    )

    server, bucket = gcs_bucket(place)
    prefix = "acme"
    keys, get = gcs_reader(server, bucket, prefix)
    connection = {"bucket": bucket, "prefix": prefix, "endpoint_url": server.endpoint}
    return TestDestination("gcs", "gcs", {"vendor": "gcs", "connection": connection,
                                          "signing_key": f"${{{SIGNING_KEY_ENV}}}"},
                           lambda model: _consumed(model, keys, get, prefix),
                           {"server": server, "bucket": bucket, "prefix": prefix})
