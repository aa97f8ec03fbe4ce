"""A BigQuery destination's client (its service-account key read from its variable, never logged),
and what the API refuses as errors naming the fix."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from transfer_platform import errors
from transfer_platform.errors import ConfigError, ConnectionFailure, MissingPrivilege, Problem

if TYPE_CHECKING:
    from google.cloud import bigquery

    from transfer_platform.destinations.bigquery.writer import BigqueryWriter
    from transfer_platform.vendors.bigquery import BigqueryDestination

#: the roles a loader needs (docs/permissions.md)
DATASET_ROLE, PROJECT_ROLE = "roles/bigquery.dataEditor", "roles/bigquery.jobUser"
CONNECT_FIX = ("check connection.project, connection.api_endpoint (if set) and the network; the service "
               "account's key is read from connection.credentials")


def make_client(destination: BigqueryDestination) -> bigquery.Client:
    """A client of the destination's project: the service-account key of ``credentials``, or
    anonymous against ``api_endpoint`` (an emulator), or Application Default Credentials."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import bigquery
    from google.oauth2 import service_account

    c, where = destination.connection, f"destinations.{destination.name}.connection.credentials"
    credentials = AnonymousCredentials() if c.api_endpoint is not None else None
    if c.credentials is not None:
        secret = c.credentials.resolve(where).get_secret_value()
        try:
            credentials = service_account.Credentials.from_service_account_info(json.loads(secret))
        except (ValueError, KeyError, TypeError):  # the message may quote the key: never shown
            raise ConfigError([Problem(where, "is not a service-account key (the JSON file of a key, whole)",
                                       "put the key file's content in the variable")]) from None
    return bigquery.Client(project=c.project, credentials=credentials, location=c.location,
                           client_options={"api_endpoint": c.api_endpoint} if c.api_endpoint else None)


def first_line(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return (str(message).strip().splitlines() or [type(exc).__name__])[0][:300]


def endpoint(destination: BigqueryDestination) -> tuple[str, int | None]:
    url = urlparse(destination.connection.api_endpoint or "https://bigquery.googleapis.com")
    return url.hostname or "", url.port or (443 if url.scheme == "https" else 80)


def missing_role(writer: BigqueryWriter, reason: str) -> MissingPrivilege:
    """The role refused, named with its grant: the project's to run jobs, else the dataset's."""
    c = writer.destination.connection
    email = getattr(getattr(writer._conn, "_credentials", None), "service_account_email", None)
    who = email if isinstance(email, str) else "the service account"
    job = "jobs" in reason.lower() and "create" in reason.lower()  # bigquery.jobs.create
    grant = (f"grant {who} {PROJECT_ROLE} on project {c.project}" if job else
             f"grant {who} {DATASET_ROLE} on dataset {c.project}.{c.dataset}") + (
        f" (a loader needs {DATASET_ROLE} on its dataset and {PROJECT_ROLE} on the project, nothing else)")
    return MissingPrivilege(writer.what, role=who, reason=reason, grant=grant)


def translated_errors(writer: BigqueryWriter) -> AbstractContextManager[None]:
    """Never the key in what is raised."""
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth
    from requests import exceptions as http

    c, what = writer.destination.connection, writer.what
    host, port = endpoint(writer.destination)

    def failure(reason: str, fix: str) -> ConnectionFailure:
        return ConnectionFailure(what, host=host, port=port, reason=reason, fix=fix)

    def not_found(exc: Exception) -> Exception:  # a table missing is the caller's to handle
        if "Dataset" not in str(exc) or c.dataset not in str(exc):
            return exc
        return failure(f"dataset {c.project}.{c.dataset} not found", f"create the dataset {c.dataset} in project "
                       f"{c.project} (the recipient's, created beforehand) or correct connection.dataset and "
                       "connection.project")

    return errors.translated([
        (api.Forbidden, lambda exc: missing_role(writer, first_line(exc))),
        (api.Unauthorized, lambda exc: failure(first_line(exc), "check the service-account key in "
                                               "connection.credentials (it may be revoked or of another project)")),
        (api.NotFound, not_found),
        ((http.ConnectionError, http.Timeout, auth.TransportError, api.RetryError),
         lambda exc: failure(type(exc).__name__ + ": the endpoint did not answer", CONNECT_FIX)),
        (auth.DefaultCredentialsError, lambda exc: ConnectionFailure(
            what, reason="no credentials: connection.credentials is not set and Application Default Credentials "
            "were not found", fix="set connection.credentials to \"${VAR}\" holding a service-account key"))])
