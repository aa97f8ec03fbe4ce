"""Azure Blob Storage (azure-storage-blob), for destinations and source staging alike: objects by
key in a container, and a model's lock as an object (:class:`~transfer_platform.storage.s3.ObjectLock`, over the
conditional writes Blob Storage has: ``If-None-Match: *`` to create, ``If-Match: <ETag>`` to
renew and delete).

Errors name the container, the endpoint and Azure's reason, never the account key (read from the
environment variable the configuration names, and remembered for log redaction).
"""

from __future__ import annotations

import logging
from typing import Any

from transfer_platform.config.connection_settings import AzureBlobConnection
from transfer_platform.errors import ConnectionFailure
from transfer_platform.storage.s3 import ClientCalls, LockedBucket, LostRace

#: the SDK's HTTP logging policy writes every request at INFO (headers, URLs): not ours to show
logging.getLogger("azure").setLevel(logging.WARNING)


class AzureStore(ClientCalls):
    """Objects in an Azure Blob Storage container; the same methods as :class:`S3Store` (its
    conditional ``IfNoneMatch`` / ``IfMatch`` keywords included), so that :class:`ObjectLock` and
    the writers use either alike."""

    def __init__(self, c: AzureBlobConnection, owner: str) -> None:
        from azure.storage.blob import BlobServiceClient, ExponentialRetry

        self.bucket = c.container
        self.uri = f"az://{c.container}"
        self.where = f"Azure container {c.container} at {c.service_url}"
        self._connection = c
        service = BlobServiceClient(c.service_url, credential={"account_name": c.account_name,
                                                                "account_key": c.key(owner)},
                                    # the SDK's default waits 15 s, then 18 s, ... between tries
                                    retry_policy=ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=2,
                                                                 random_jitter_range=1),
                                    connection_timeout=5, read_timeout=60)
        self.client = service.get_container_client(c.container)

    def put(self, key: str, data: bytes, **conditions: str) -> str:
        from azure.core import MatchConditions

        kwargs: dict[str, Any] = {"overwrite": True}
        if conditions.get("IfNoneMatch") == "*":
            kwargs = {"overwrite": False}  # created only if absent
        elif "IfMatch" in conditions:
            kwargs |= {"etag": conditions["IfMatch"], "match_condition": MatchConditions.IfNotModified}
        answer = self._call("write", key, lambda: self.client.get_blob_client(key).upload_blob(data, **kwargs))
        return answer["etag"].strip('"')

    def get(self, key: str) -> bytes | None:
        return self.get_with_etag(key)[0]

    def get_with_etag(self, key: str) -> tuple[bytes | None, str | None]:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            download = self.client.get_blob_client(key).download_blob()
            return download.readall(), download.properties.etag.strip('"')
        except ResourceNotFoundError as exc:
            if getattr(exc, "error_code", None) == "BlobNotFound":
                return None, None
            raise self._failure("read", key, exc) from None
        except Exception as exc:  # noqa: BLE001 - an unreachable endpoint, a timeout
            raise self._failure("read", key, exc) from None

    def etag(self, key: str, md5: str) -> str:
        """An object's ETag, asked of the store (written by pyarrow: not an MD5)."""
        return self._call("read", key, lambda: self.client.get_blob_client(key).get_blob_properties()).etag.strip('"')

    def location(self, key: str) -> str:
        """``key`` as pyarrow's Azure file system names it."""
        return f"{self.bucket}/{key}"

    def keys(self, prefix: str) -> list[str]:
        return sorted(self._call("list", prefix, lambda: [b.name for b in self.client.list_blobs(name_starts_with=prefix)]))

    def delete(self, keys: list[str], **conditions: str) -> None:
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceNotFoundError

        for key in keys:
            kwargs: dict[str, Any] = {}
            if "IfMatch" in conditions:  # only if it is still the one we saw
                kwargs = {"etag": conditions["IfMatch"], "match_condition": MatchConditions.IfNotModified}
            try:
                self.client.get_blob_client(key).delete_blob(**kwargs)
            except ResourceNotFoundError as exc:
                if getattr(exc, "error_code", None) != "BlobNotFound":  # gone already: deleted
                    raise self._failure("delete", key, exc) from None
            except Exception as exc:  # noqa: BLE001 - told apart in _failure
                raise self._failure("delete", key, exc) from None

    def _failure(self, what: str, key: str, exc: Exception) -> Exception:
        from azure.core.exceptions import HttpResponseError, ServiceRequestError

        c = self._connection
        if isinstance(exc, HttpResponseError):
            code = str(getattr(exc, "error_code", None) or "")
            code = getattr(getattr(exc, "error_code", None), "value", code)
            if code in ("ConditionNotMet", "BlobAlreadyExists") or exc.status_code == 412:
                return LostRace(code)
            fixes = {
                "ContainerNotFound": "create the container, or correct connection.container",
                "AuthenticationFailed": f"correct the account key (connection.account_key's variable) of "
                                        f"account {c.account_name}",
                "AuthorizationFailure": f"correct the account key (connection.account_key's variable) of "
                                        f"account {c.account_name}, or allow this network on the account",
                "AuthorizationPermissionMismatch": f"grant the role Storage Blob Data Contributor on container "
                                                   f"{c.container} (see docs/permissions.md)",
            }
            message = next(iter((exc.message or exc.reason or "").splitlines()), "").rstrip(".")
            reason = f"{code or exc.status_code}: {message}".strip(": ")
            return ConnectionFailure(f"object storage {self.where} ({what} {key})", reason=reason,
                                     fix=fixes.get(code, "check connection.account_name, container, endpoint_url "
                                                         "and the account key"))
        reason = ("the endpoint cannot be reached" if isinstance(exc, ServiceRequestError)
                  else f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return ConnectionFailure(f"object storage {self.where} ({what} {key})", reason=reason,
                                 fix="check connection.endpoint_url (or account_name) and that the store is running")


class AzureBucketStore(LockedBucket, AzureStore):
    """Object storage's store in a container (:class:`stores.Store`). A model's lock: the object
    ``<books>/<model>/lock.json`` (:class:`~transfer_platform.storage.s3.ObjectLock`)."""

    def __init__(self, connection: AzureBlobConnection, owner: str) -> None:
        super().__init__(connection, owner)
        self.bucket_name = connection.container
        self.options = storage_options(connection, owner)


def storage_options(c: AzureBlobConnection, owner: str) -> dict[str, str]:
    """delta-rs's options for the container (the key read from its variable); pyarrow's Azure
    file system is built from the same (``staged_files.staging_filesystem``)."""
    options = {"azure_storage_account_name": c.account_name, "azure_storage_account_key": c.key(owner)}
    if c.endpoint_url:
        options["azure_storage_endpoint"] = c.service_url
        options["allow_http"] = str(c.endpoint_url.startswith("http://")).lower()
    return options
