"""Google Cloud Storage (google-cloud-storage, the JSON API), for object storage's destinations:
objects by key in a bucket, and a model's lock as an object whose *generation* is the condition
(GCS's preconditions: ``ifGenerationMatch=0`` creates only if absent, ``ifGenerationMatch=<n>``
replaces or deletes only the version seen; ``If-None-Match`` is not one of them).

Credentials: a service account's JSON key, read from the variable the configuration names and
remembered for log redaction (the key and its private key, and every access token minted from
it); errors name the bucket, the endpoint and Google's reason, never the key. Without a key only an
emulator's endpoint is reached, anonymously.

A large window's files are written by Spark's executors through pyarrow's ``GcsFileSystem``
(:func:`gcs_filesystem`), given an access token minted here (``options``), never the key.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from transfer_platform.config.connection_settings import GcsConnection
from transfer_platform.config.secrets import remember_secret
from transfer_platform.errors import ConnectionFailure, transfer_running
from transfer_platform.storage.locks import Lock, holder_text, who_holds
from transfer_platform.storage.s3 import ClientCalls, LockedBucket, LostRace
from transfer_platform.storage.s3 import _expired as expired

#: what the service account's access tokens may do: read and write objects
SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
#: an access token handed to the executors has at least this long to live
TOKEN_MARGIN = timedelta(minutes=30)
#: the role that gives a service account what transfers do in a bucket (docs/permissions.md)
ROLE = "roles/storage.objectAdmin"


class GcsStore(ClientCalls):
    """Objects in a Google Cloud Storage bucket through the JSON API."""

    def __init__(self, c: GcsConnection, owner: str) -> None:
        from google.cloud import storage
        from google.cloud.storage.retry import DEFAULT_RETRY

        self.bucket_name = c.bucket
        self.where = f"GCS bucket {c.bucket} at {c.endpoint_url or 'storage.googleapis.com'}"
        self._connection = c
        self._credentials, project = _credentials(c, owner, self.where)
        options = {"api_endpoint": c.endpoint_url.rstrip("/")} if c.endpoint_url else None
        client = storage.Client(project=project, credentials=self._credentials, client_options=options)
        self.bucket = client.bucket(c.bucket)
        # the library's default retries an unreachable endpoint for two minutes
        self._retry = DEFAULT_RETRY.with_delay(initial=0.5, maximum=4.0).with_timeout(6.0)
        self._timeout = (5, 60)

    # -- the Store protocol's objects -----------------------------------------------------------

    def put(self, key: str, data: bytes) -> str:
        return self.upload(key, data)[0]

    def upload(self, key: str, data: bytes, *, if_generation_match: int | None = None) -> tuple[str, int]:
        """Write an object whole; with ``if_generation_match`` only over that version (0: only if
        absent), else :class:`LostRace`. Returns its ETag and generation."""
        blob = self.bucket.blob(key)
        self._call("write", key, lambda: blob.upload_from_string(
            data, content_type="application/octet-stream", if_generation_match=if_generation_match,
            retry=self._retry, timeout=self._timeout))
        return blob.etag, blob.generation

    def get(self, key: str) -> bytes | None:
        return self.get_with_generation(key)[0]

    def get_with_generation(self, key: str) -> tuple[bytes | None, int | None]:
        from google.api_core.exceptions import NotFound

        blob = self.bucket.blob(key)
        try:
            data = blob.download_as_bytes(retry=self._retry, timeout=self._timeout)
        except NotFound:
            return None, None
        except Exception as exc:  # noqa: BLE001 - the library's errors, told apart in _failure
            raise self._failure("read", key, exc) from None
        return data, blob.generation

    def etag(self, key: str, md5: str) -> str:
        """An object's ETag, asked of the store (one written by pyarrow)."""
        blob = self.bucket.blob(key)
        self._call("read", key, lambda: blob.reload(retry=self._retry, timeout=self._timeout))
        return blob.etag

    def location(self, key: str) -> str:
        """``key`` as pyarrow's GCS file system names it."""
        return f"{self.bucket_name}/{key}"

    def keys(self, prefix: str) -> list[str]:
        return sorted(self._call("list", prefix, lambda: [b.name for b in self.bucket.client.list_blobs(
            self.bucket, prefix=prefix, retry=self._retry, timeout=self._timeout)]))

    def delete(self, keys: list[str], *, if_generation_match: int | None = None) -> None:
        from google.api_core.exceptions import NotFound

        for key in keys:
            try:
                self.bucket.blob(key).delete(if_generation_match=if_generation_match, retry=self._retry,
                                             timeout=self._timeout)
            except NotFound:
                pass  # gone already: deleted
            except Exception as exc:  # noqa: BLE001 - told apart in _failure
                raise self._failure("delete", key, exc) from None

    # -- pyarrow's file system, for the executors -----------------------------------------------

    @property
    def options(self) -> dict[str, str]:
        """What :func:`gcs_filesystem` builds pyarrow's file system from: the emulator's endpoint,
        or an access token with at least ``TOKEN_MARGIN`` to live (minted here; the key stays)."""
        c = self._connection
        options = {"gcs_scheme": "https"}
        if c.endpoint_url:
            scheme, _, authority = c.endpoint_url.rstrip("/").partition("://")
            options |= {"gcs_scheme": scheme, "gcs_endpoint_override": authority}
        if c.credentials is None:
            return options | {"gcs_anonymous": "true"}
        token, expiry = self._token()
        return options | {"gcs_access_token": token, "gcs_token_expiration": expiry.isoformat()}

    def _token(self) -> tuple[str, datetime]:
        from google.auth.transport.requests import Request

        credentials = self._credentials
        expiry = credentials.expiry.replace(tzinfo=UTC) if credentials.expiry else None
        if credentials.token is None or expiry is None or expiry - datetime.now(UTC) < TOKEN_MARGIN:
            self._call("authenticate", "", lambda: credentials.refresh(Request()))
            expiry = credentials.expiry.replace(tzinfo=UTC)
        remember_secret(credentials.token)
        return credentials.token, expiry

    # -- errors -----------------------------------------------------------------------------------

    def _failure(self, what: str, key: str, exc: Exception) -> Exception:
        from google.api_core import exceptions as api
        from google.auth.exceptions import GoogleAuthError, TransportError

        if isinstance(exc, api.RetryError) and exc.cause is not None:
            exc = exc.cause
        c, subject = self._connection, f"object storage {self.where} ({what} {key})".replace(" )", ")")
        if isinstance(exc, api.PreconditionFailed):
            return LostRace(str(exc.code))
        if isinstance(exc, api.GoogleAPICallError):
            message = next(iter((exc.message or "").splitlines()), "").rstrip(".")
            reason = f"{exc.code} {exc.reason or ''}: {message}".replace(" :", ":").strip(": ")
            permission = re.search(r"storage\.\w+\.\w+", message)
            fixes = {
                404: f"create the bucket {c.bucket}, or correct connection.bucket",
                401: "correct the service account key (connection.credentials's variable)",
                403: f"grant the service account {ROLE} on bucket {c.bucket}"
                     + (f" (it lacks {permission.group(0)})" if permission else "") + " (see docs/permissions.md)",
            }
            return ConnectionFailure(subject, reason=reason,
                                     fix=fixes.get(exc.code, "check connection.bucket, endpoint_url and credentials"))
        if isinstance(exc, TransportError):
            return ConnectionFailure(subject, reason="no access token for the service account: its token_uri "
                                                     "cannot be reached",
                                     fix="check the network to oauth2.googleapis.com and the token_uri of the "
                                         "service account key (connection.credentials's variable)")
        if isinstance(exc, GoogleAuthError):
            return ConnectionFailure(subject, reason=f"no access token for the service account: {type(exc).__name__}",
                                     fix="correct the service account key (connection.credentials's variable), "
                                         "or enable the account and its key in Google Cloud IAM")
        if _unreachable(exc):
            return ConnectionFailure(subject, reason="the endpoint cannot be reached",
                                     fix="check connection.endpoint_url (or the network to Google) and that "
                                         "the store is running")
        return ConnectionFailure(subject, reason=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                                 fix="check connection.bucket, endpoint_url and credentials")


def _unreachable(exc: Exception) -> bool:
    import requests

    return isinstance(exc, requests.ConnectionError | requests.Timeout | ConnectionError | TimeoutError)


def _credentials(c: GcsConnection, owner: str, where: str) -> tuple[Any, str]:
    """The service account's credentials from its JSON key (and its project), or anonymous ones
    (an emulator's endpoint). A key that is not one is refused naming its variable, not its text."""
    from google.auth.credentials import AnonymousCredentials

    if c.credentials is None:
        return AnonymousCredentials(), "<none>"
    from google.oauth2 import service_account

    text = c.credentials.resolve(f"{owner}.connection.credentials").get_secret_value()
    fix = (f"put a service account's JSON key (Google Cloud IAM, Service accounts, Keys, JSON) in "
           f"{c.credentials}")
    try:
        info = json.loads(text)
    except ValueError:
        raise ConnectionFailure(f"object storage {where}", reason=f"{c.credentials} is not JSON",
                                fix=fix) from None
    if not isinstance(info, dict):
        raise ConnectionFailure(f"object storage {where}", reason=f"{c.credentials} is not a JSON object", fix=fix)
    if isinstance(info.get("private_key"), str):
        remember_secret(info["private_key"])
    missing = [f for f in ("type", "client_email", "private_key", "token_uri") if not info.get(f)]
    if missing or info.get("type") != "service_account":
        reason = (f"{c.credentials} lacks {', '.join(missing)}" if missing
                  else f"{c.credentials} is a '{info.get('type')}' key, not a service account's")
        raise ConnectionFailure(f"object storage {where}", reason=reason, fix=fix)
    try:
        credentials = service_account.Credentials.from_service_account_info(info, scopes=[SCOPE])
    except (ValueError, TypeError, IndexError):
        raise ConnectionFailure(f"object storage {where}",
                                reason=f"the private_key in {c.credentials} is not a usable key", fix=fix) from None
    return credentials, info.get("project_id") or "<none>"


class GenerationLock(Lock):
    """A model's lock as an object, as :class:`~transfer_platform.storage.s3.ObjectLock` (the
    holder's text, renewed by each window, taken over when expired) over generations: created
    with ``ifGenerationMatch=0``, renewed and taken over with ``ifGenerationMatch=<its
    generation>`` (of two transfers taking over the same stale lock, exactly one wins), deleted at
    release only if still ours."""

    def __init__(self, store: GcsStore, model: str, key: str, transfer_id: str) -> None:
        self.store, self.model, self.key, self.transfer_id = store, model, key, transfer_id
        self._condition = 0  # absent; or the generation of the dead holder's lock being replaced
        self._generation = 0
        self._held: bytes | None = None

    def take(self, within: float) -> bool:
        try:
            self._generation = self.store.upload(self.key, holder_text(self.transfer_id).encode(),
                                                 if_generation_match=self._condition)[1]
        except LostRace:
            return False
        return True

    def take_over(self) -> bool:
        """Released meanwhile, or its transfer gone (replace exactly that version): True."""
        self._held, generation = self.store.get_with_generation(self.key)
        self._condition = 0 if self._held is None or not expired(self._held) else generation
        return self._held is None or self._condition != 0

    def holder(self) -> str:
        return who_holds((self._held or b"").decode(errors="replace"))

    def renew(self) -> None:
        try:
            self._generation = self.store.upload(self.key, holder_text(self.transfer_id).encode(),
                                                 if_generation_match=self._generation)[1]
        except LostRace:
            raise transfer_running(
                self.model, None, f"its lock ({self.store.where}, {self.key}) was taken over by "
                "another transfer while this one held it (a window took longer than the lease); this transfer "
                "stops", "run it again once the other one ends") from None

    def release(self) -> None:
        self.store.delete([self.key], if_generation_match=self._generation)


class GcsBucketStore(LockedBucket, GcsStore):
    """Object storage's store in a GCS bucket (:class:`stores.Store`). A model's lock: the object
    ``<books>/<model>/lock.json`` (:class:`GenerationLock`)."""

    def model_lock(self, model: str, key: str, transfer_id: str, destination: str) -> GenerationLock:
        return GenerationLock(self, model, key, transfer_id)


def gcs_filesystem(options: dict[str, str]):  # -> pyarrow.fs.GcsFileSystem
    """pyarrow's GCS file system from :attr:`GcsStore.options` (in an executor's worker)."""
    from pyarrow import fs

    kwargs: dict[str, Any] = {"scheme": options["gcs_scheme"], "retry_time_limit": timedelta(seconds=60)}
    if "gcs_endpoint_override" in options:
        kwargs["endpoint_override"] = options["gcs_endpoint_override"]
    if options.get("gcs_anonymous") == "true":
        kwargs["anonymous"] = True
    else:
        kwargs |= {"access_token": options["gcs_access_token"],
                   "credential_token_expiration": datetime.fromisoformat(options["gcs_token_expiration"])}
    return fs.GcsFileSystem(**kwargs)
