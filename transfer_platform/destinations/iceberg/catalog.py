"""The Iceberg SQL catalog in PostgreSQL: opening it (pyiceberg's ``SqlCatalog`` over SQLAlchemy
and psycopg2), the models' locks (session advisory locks on the catalog's database, through a
psycopg connection of our own), and what PostgreSQL refuses, named with its fix.

The catalog's two tables (``iceberg_tables``, ``iceberg_namespace_properties``) live in the
connection's ``schema`` (``public`` by default), created there by the first transfer; several
catalogs (``catalog_name``) can share them. The password is read from its environment variable
when the catalog is opened and never appears in a message (SQLAlchemy prints URLs without it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import quote

from transfer_platform.config.connection_settings import DatabaseConnection
from transfer_platform.core.sql import quote_ident
from transfer_platform.errors import ConnectionFailure, MissingPrivilege
from transfer_platform.runtime.connections import CONNECT_TIMEOUT_SECONDS, password_of
from transfer_platform.storage.locks import AdvisoryLock, Locks, advisory_key, who_holds

if TYPE_CHECKING:
    import psycopg
    from pyiceberg.catalog.sql import SqlCatalog

#: PostgreSQL's words for a CREATE whose schema, on the search path, the role has no USAGE on
NO_SCHEMA = "no schema has been selected to create in"
_FIX = ("check that the catalog's PostgreSQL is running and accepts connections, and connection.catalog's "
        "host, port, database, username and password variable")


class Catalog:
    """One destination's catalog: its database connection, its pyiceberg catalog, its locks."""

    def __init__(self, connection: DatabaseConnection, catalog_name: str, what: str,
                 file_io: dict[str, str], warehouse: str) -> None:
        self.connection = connection
        self.catalog_name = catalog_name
        self.schema = connection.schema_ or "public"
        self.what = what  # "Iceberg catalog of destination 'x' (...)"
        self.file_io = file_io
        self.warehouse = warehouse
        self._conn: psycopg.Connection | None = None
        self._catalog: SqlCatalog | None = None
        self._locked = Locks()

    # -- connections ----------------------------------------------------------------------------

    @contextmanager
    def errors(self) -> Iterator[None]:
        """The catalog database unreachable -> ``ConnectionFailure``; refused -> ``MissingPrivilege``."""
        import psycopg
        import sqlalchemy.exc

        try:
            yield
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.InvalidSchemaName,
                sqlalchemy.exc.ProgrammingError) as exc:
            text = _first_line(exc)
            if NO_SCHEMA in text:  # the schema is on the search path, but the role may not use it
                text = f"{text}: the role has no USAGE on schema {self.schema!r}"
            elif "permission denied" not in text and not isinstance(exc, psycopg.errors.InsufficientPrivilege):
                raise
            role, schema = quote_ident(self.connection.username), quote_ident(self.schema)
            raise MissingPrivilege(self.what, role=self.connection.username, reason=text,
                                   grant=f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {role}, and SELECT, "
                                         f"INSERT, UPDATE, DELETE on {schema}.iceberg_tables and "
                                         f"{schema}.iceberg_namespace_properties") from None
        except (psycopg.OperationalError, sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as exc:
            self.forget()
            raise ConnectionFailure(self.what, host=self.connection.host, port=self.connection.port,
                                    reason=_first_line(exc), fix=_FIX) from None

    @property
    def conn(self) -> psycopg.Connection:
        """Our own connection to the catalog's database (locks, existence checks), autocommit."""
        import psycopg

        from transfer_platform.network.addresses import pinned_hostaddr

        if self._conn is None or self._conn.closed:
            c = self.connection
            with self.errors():
                self._conn = psycopg.connect(
                    host=c.host, **pinned_hostaddr(c), port=c.port, dbname=c.database, user=c.username,
                    password=password_of(c, f"{self.what}.connection.catalog.password"),
                    connect_timeout=CONNECT_TIMEOUT_SECONDS, autocommit=True,
                    options=f"-c TimeZone=UTC -c search_path={_option_value(self.schema)}",
                    application_name="transfer_platform")
        return self._conn

    def exists(self) -> bool:
        """Whether the catalog's tables exist (read only)."""
        with self.errors():
            found = self.conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                                      (f"{quote_ident(self.schema)}.iceberg_tables",)).fetchone()
        return bool(found[0])

    def open(self, *, create: bool) -> SqlCatalog | None:
        """pyiceberg's catalog; ``create``: its schema and tables created if missing. Without
        ``create``, ``None`` when its tables do not exist (nothing was ever committed)."""
        if self._catalog is not None:
            return self._catalog
        if create:
            with self.errors():
                # only when missing: PostgreSQL checks CREATE SCHEMA IF NOT EXISTS against the
                # database's CREATE right even when the schema exists
                if not schema_exists(self.conn, self.schema):
                    self.conn.execute(f"CREATE SCHEMA {quote_ident(self.schema)}")
        elif not self.exists():
            return None
        from pyiceberg.catalog.sql import SqlCatalog

        c = self.connection
        password = password_of(c, f"{self.what}.connection.catalog.password")
        login = quote(c.username, safe="") + (f":{quote(password, safe='')}" if password else "")
        options = quote(f"-c TimeZone=UTC -c search_path={_option_value(self.schema)}", safe="")
        uri = (f"postgresql+psycopg2://{login}@{c.host}:{c.port}/{quote(c.database, safe='')}"
               f"?connect_timeout={CONNECT_TIMEOUT_SECONDS}&application_name=transfer_platform&options={options}")
        with self.errors():
            self._catalog = SqlCatalog(self.catalog_name, uri=uri, warehouse=self.warehouse,
                                       init_catalog_tables=str(create).lower(), **self.file_io)
        return self._catalog

    def forget(self) -> None:
        """Drop the pyiceberg catalog (its engine's connections); the locks stay held."""
        if self._catalog is not None:
            self._catalog.engine.dispose()
            self._catalog = None

    def close(self) -> None:
        """Release everything, the models' locks with our connection."""
        self.forget()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._locked.clear()

    # -- locks ------------------------------------------------------------------------------------

    def lock(self, namespace: str, model: str, transfer_id: str, *, destination: str, wait_seconds: float) -> None:
        """A session advisory lock on the catalog's database, one per (catalog, namespace, model):
        released when our connection closes or its process dies. Waits ``wait_seconds``, then
        ``TransferRunning`` naming the holder."""
        key = advisory_key(self.connection.database, "iceberg", self.schema, self.catalog_name, namespace, model)
        with self.errors():
            self._locked.hold(str(key), CatalogLock(self.conn, key, transfer_id), destination=destination,
                              wait_seconds=wait_seconds)


class CatalogLock(AdvisoryLock):
    """A model's advisory lock on the catalog's database, its holder named as a transfer's."""

    def holder(self) -> str:
        held = self.session()
        if held is None:
            return who_holds("")
        return (f"transfer {(held[0] or '?').removeprefix('transfer_platform ')}, process (a session of the "
                f"catalog's database) on PostgreSQL, since {held[1].isoformat(timespec='seconds')}")


def _option_value(name: str) -> str:
    """A libpq ``options`` value: spaces and backslashes escaped."""
    return name.replace("\\", "\\\\").replace(" ", "\\ ")


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("(Background")]
    line = lines[0] if lines else type(exc).__name__
    return line.split(") ", 1)[1] if line.startswith("(psycopg") and ") " in line else line


def schema_exists(conn, schema: str) -> bool:  # a psycopg connection
    return conn.execute("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %s)", (schema,)).fetchone()[0]
