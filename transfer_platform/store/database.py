"""Opening the store and migrating it (Alembic, run from code: ``transfer-platform store migrate``,
and by the API at start)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from transfer_platform.config.connection_settings import DatabaseConnection
from transfer_platform.errors import ConfigError, ConnectionFailure, Problem

DEFAULT_SCHEMA = "transfer_platform"
_MIGRATIONS = Path(__file__).parent / "migrations"


def schema_of(connection: DatabaseConnection) -> str:
    return connection.schema_ or DEFAULT_SCHEMA


#: the engines this process opened, newest last; at most :data:`MAX_ENGINES` (one per store: a
#: process has one, a test session many), the oldest disposed (its connections closed) beyond
_engines: OrderedDict[DatabaseConnection, Engine] = OrderedDict()
_engines_lock = threading.Lock()
MAX_ENGINES = 4


def _forget_pools_in_child() -> None:
    """A forked process (the preloaded run workers) must not use its parent's pooled connections
    (two processes on one socket): it opens its own (SQLAlchemy's ``dispose(close=False)``)."""
    for engine in list(_engines.values()):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_forget_pools_in_child)


def engine_for(connection: DatabaseConnection) -> Engine:
    """A pooled engine on the store's database; every session's ``search_path`` is the store's
    schema, so the tables are named without it. Safe across ``fork`` (the child opens its own)."""
    with _engines_lock:
        engine = _engines.get(connection)
        if engine is not None:
            _engines.move_to_end(connection)
            return engine
        password = connection.password.resolve("store.connection.password").get_secret_value() \
            if connection.password else None
        url = URL.create("postgresql+psycopg", username=connection.username, password=password,
                         host=connection.host, port=connection.port, database=connection.database)
        engine = sa.create_engine(url, pool_size=5, max_overflow=10, pool_pre_ping=True,
                                  connect_args={"options": f"-csearch_path={schema_of(connection)}",
                                                "connect_timeout": 10},
                                  hide_parameters=True)
        _engines[connection] = engine
        while len(_engines) > MAX_ENGINES:
            _engines.popitem(last=False)[1].dispose()
        return engine


def dispose_engines() -> None:
    """Close every pooled connection to a store (a test's store is dropped after it)."""
    with _engines_lock:
        while _engines:
            _engines.popitem()[1].dispose()


def migrate(connection: DatabaseConnection, revision: str = "head") -> str:
    """Create the schema if needed and bring the tables to ``revision`` (the newest); returns it."""
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext

    engine = engine_for(connection)
    schema = schema_of(connection)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{schema.replace(chr(34), chr(34) * 2)}"'))
            config = Config()
            config.set_main_option("script_location", str(_MIGRATIONS))
            config.attributes["connection"] = conn
            config.attributes["schema"] = schema
            command.upgrade(config, revision)
            return MigrationContext.configure(conn, opts={"version_table_schema": schema}).get_current_revision()
    except sa.exc.OperationalError as exc:
        raise ConnectionFailure(f"the store's database {connection.database}", host=connection.host,
                                port=connection.port, reason=str(exc.orig).strip().splitlines()[0],
                                fix="check store.connection in the configuration file") from None
    except sa.exc.ProgrammingError as exc:
        raise ConfigError([Problem("store.connection", f"cannot migrate the store: "
                                   f"{str(exc.orig).strip().splitlines()[0]}",
                                   f"grant the store's user CREATE on database {connection.database} "
                                   f"(or create schema {schema} owned by it)")]) from None
