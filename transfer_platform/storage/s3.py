"""S3 (boto3), for destinations and source staging alike: objects by key, and a model's lock as an object.

Errors name the bucket, the endpoint and S3's reason, never a secret (the keys are read from the
environment variables the configuration names, and remembered for log redaction).
"""

from __future__ import annotations

import functools
import json
from contextlib import suppress
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from transfer_platform.config.connection_settings import S3Connection
from transfer_platform.errors import ConnectionFailure
from transfer_platform.storage.locks import Lock, Locks, holder_text, process_gone, who_holds

if TYPE_CHECKING:
    from collections.abc import Callable

    from transfer_platform.probes import Check, Probe

#: a lock object renewed longer ago than this is a dead transfer's (each window renews it)
S3_LOCK_LEASE_SECONDS = 900


class ClientCalls:
    """A bucket store's calls of its client (S3's, Azure's, GCS's), each error told apart by the
    store's ``_failure`` (the bucket, the endpoint and the fix named, never a secret)."""

    _failure: Callable[[str, str, Exception], Exception]

    def _call(self, what: str, key: str, call, *args, **kwargs):
        try:
            return call(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the client's errors, told apart in _failure
            raise self._failure(what, key, exc) from None


class S3Store(ClientCalls):
    """Objects in an S3 bucket through boto3 (an S3-compatible store through its endpoint URL)."""

    def __init__(self, c: S3Connection, owner: str, *, at: str = "connection") -> None:
        """``owner``: what the connection belongs to, as errors name it ("destination 'x'");
        ``at``: where in it the connection's fields are, as fixes name them."""
        import boto3
        from botocore.config import Config

        self.bucket = c.bucket
        self.at = at
        self.uri = f"s3://{c.bucket}"
        self.where = f"bucket {c.bucket} at {c.endpoint_url or f'AWS S3 ({c.region})'}"
        credentials = c.credentials(owner, ("aws_access_key_id", "aws_secret_access_key"), at=at)
        self.client = boto3.client(
            "s3", endpoint_url=c.endpoint_url, region_name=c.region, **credentials,
            config=Config(s3={"addressing_style": "path" if c.path_style else "auto"},
                          connect_timeout=5, read_timeout=60, retries={"max_attempts": 3}))

    def put(self, key: str, data: bytes, **conditions: str) -> str:
        answer = self._call("write", key, self.client.put_object, Bucket=self.bucket, Key=key, Body=data,
                            **conditions)
        return answer["ETag"].strip('"')

    def get(self, key: str) -> bytes | None:
        return self.get_with_etag(key)[0]

    def etag(self, key: str, md5: str) -> str:
        """An object's ETag, asked of the store (an object written in parts has no MD5 ETag)."""
        return self._call("read", key, self.client.head_object, Bucket=self.bucket, Key=key)["ETag"].strip('"')

    def location(self, key: str) -> str:
        """``key`` as pyarrow's S3 file system names it."""
        return f"{self.bucket}/{key}"

    def get_with_etag(self, key: str) -> tuple[bytes | None, str | None]:
        from botocore.exceptions import ClientError

        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None, None
            raise self._failure("read", key, exc) from None
        except Exception as exc:  # noqa: BLE001 - an unreachable endpoint, a timeout
            raise self._failure("read", key, exc) from None
        return answer["Body"].read(), answer["ETag"].strip('"')

    def keys(self, prefix: str) -> list[str]:
        pages = self._call("list", prefix, lambda: list(self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)))
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def delete(self, keys: list[str], **conditions: str) -> None:
        if conditions:  # one object, only if it is still the one we saw
            for key in keys:
                self._call("delete", key, self.client.delete_object, Bucket=self.bucket, Key=key, **conditions)
            return
        for start in range(0, len(keys), 1000):
            chunk = [{"Key": key} for key in keys[start:start + 1000]]
            self._call("delete", chunk[0]["Key"], self.client.delete_objects, Bucket=self.bucket,
                       Delete={"Objects": chunk, "Quiet": True})

    def _failure(self, what: str, key: str, exc: Exception) -> Exception:
        from botocore.exceptions import ClientError, EndpointConnectionError

        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "PreconditionFailed":
                return LostRace(code)
            fixes = {
                "NoSuchBucket": f"create the bucket, or correct {self.at}.bucket",
                "InvalidAccessKeyId": f"correct the access key id ({self.at}.access_key_id's variable)",
                "SignatureDoesNotMatch": f"correct the secret ({self.at}.secret_access_key's variable)",
                "AccessDenied": f"grant the key s3:GetObject, s3:PutObject, s3:DeleteObject and "
                                f"s3:ListBucket on {self.bucket} (see docs/permissions.md)",
            }
            reason = f"{code}: {exc.response.get('Error', {}).get('Message', '')}".strip(": ")
            return ConnectionFailure(f"object storage {self.where} ({what} {key})", reason=reason,
                                     fix=fixes.get(code, f"check {self.at}.bucket, endpoint_url, region and the keys"))
        reason = ("the endpoint cannot be reached" if isinstance(exc, EndpointConnectionError)
                  else f"{type(exc).__name__}: {exc}")
        return ConnectionFailure(f"object storage {self.where} ({what} {key})", reason=reason,
                                 fix=f"check {self.at}.endpoint_url and that the store is running")


class LostRace(Exception):
    """A conditional write or delete found the object changed (another transfer's lock)."""


class ObjectLock(Lock):
    """A model's lock as the object ``key``: created only if absent (S3's conditional write),
    renewed by each window over its own ETag, taken over when its holder is gone
    (:func:`_expired`: deleted only if unchanged), deleted at release only if still ours."""

    def __init__(self, store: S3Store, key: str, transfer_id: str) -> None:
        self.store, self.key, self.transfer_id = store, key, transfer_id
        self._etag = ""
        self._held: bytes | None = None  # the holder's text, as last read

    def take(self, within: float) -> bool:
        try:
            self._etag = self.store.put(self.key, holder_text(self.transfer_id).encode(), IfNoneMatch="*")
        except LostRace:
            return False
        return True

    def take_over(self) -> bool:
        self._held, etag = self.store.get_with_etag(self.key)
        if self._held is None or not _expired(self._held):
            return False
        with suppress(LostRace):  # someone else took it over first: wait as for them
            self.store.delete([self.key], IfMatch=f'"{etag}"')
        return True

    def holder(self) -> str:
        return who_holds((self._held or b"").decode(errors="replace"))

    def renew(self) -> None:
        self._etag = self.store.put(self.key, holder_text(self.transfer_id).encode(), IfMatch=f'"{self._etag}"')

    def release(self) -> None:
        self.store.delete([self.key], IfMatch=f'"{self._etag}"')


class LockedBucket:
    """What object storage's store adds to its objects: the models' locks, each the object
    ``<books>/<model>/lock.json`` (:meth:`model_lock`: an :class:`ObjectLock` unless the store's
    compare-and-set differs)."""

    def model_lock(self, model: str, key: str, transfer_id: str, destination: str) -> Lock:
        return ObjectLock(self, key, transfer_id)

    def lock(self, books: str, model: str, transfer_id: str, *, destination: str, wait_seconds: float) -> None:
        self._locks.hold(model, self.model_lock(model, f"{books}/{model}/lock.json", transfer_id, destination), destination=destination,
                         wait_seconds=wait_seconds)

    def renew(self, model: str, transfer_id: str) -> None:
        self._locks.renew(model)

    def release_all(self) -> None:
        self._locks.release_all()

    def holds_locks(self) -> bool:
        return bool(self._locks)

    @functools.cached_property
    def _locks(self) -> Locks:
        return Locks()


def _expired(lock: bytes) -> bool:
    """A lock object whose transfer is gone: renewed longer ago than the lease, or held by a
    process of this machine that no longer runs (a transfer killed outright)."""
    try:
        holder = json.loads(lock)
        since = datetime.fromisoformat(holder["since"])
    except (ValueError, KeyError, TypeError):
        return True
    if process_gone(holder.get("host"), holder.get("pid")):
        return True
    return (datetime.now(UTC) - since).total_seconds() > S3_LOCK_LEASE_SECONDS


def storage_options(c: S3Connection, owner: str, *, at: str = "connection") -> dict[str, str]:
    """delta-rs's options for the connection (its keys read from their variables)."""
    options = {"AWS_REGION": c.region}
    if c.endpoint_url:
        options["AWS_ENDPOINT_URL"] = c.endpoint_url
        options["AWS_ALLOW_HTTP"] = str(c.endpoint_url.startswith("http://")).lower()
    if c.path_style:
        options["AWS_FORCE_PATH_STYLE"] = "true"
    options |= c.credentials(owner, ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"), at=at)
    return options


def probe_objects(probe: Probe, check: Callable[[], None], store, key: str, under: str) -> list[Check]:
    """``test-connection`` where transfers write objects (a bucket, or object storage's folder):
    ``check()`` reaches and lists; then ``key`` is written, read back, replaced and deleted (and
    deleted whatever happens)."""
    reach = f"reach and list {store.where}"
    step = f"write, read, replace and delete objects under {under}"
    try:
        check()
    except ConnectionFailure as exc:
        probe.failed(reach, exc.reason, exc.fix)
        probe.skipped([step], "not reachable")
        return probe.checks
    probe.passed(reach)
    try:
        store.put(key, b"transfer_platform test-connection probe")
        if store.get(key) is None:
            probe.failed(step, "an object just written could not be read back",
                         f"check that reads after writes see the object in {store.where}")
        else:
            store.put(key, b"replaced")
            store.delete([key])
            probe.passed(step)
    except ConnectionFailure as exc:
        probe.failed(step, exc.reason, exc.fix)
    finally:
        with suppress(Exception):
            store.delete([key])
    return probe.checks
