"""The SQL text of the Snowflake destination, planned without a database:
:class:`SnowflakeDialect` (the statements of the SQL writer's algorithm as Snowflake takes them)
and those of Snowflake's own steps (the stage, ``PUT``, ``COPY INTO``, the model's lock row).

Every name is quoted, so it keeps its case (Snowflake upper-cases unquoted names): a model's
table ``events`` is ``"events"``. Every table is named in full, ``"<database>"."<schema>"."<table>"``,
and the catalog is read from ``"<database>".INFORMATION_SCHEMA``. Parameters are the connector's
client-side ``%s``. Snowflake runs DDL outside transactions (each DDL statement commits), so the
window's commit holds only DML: the staged rows merged by an ``UPDATE ... FROM`` and an
``INSERT ... WHERE NOT EXISTS`` (what a ``MERGE`` with the same conditions does), the soft
deletes, the state and the lock's lease, in one ``BEGIN ... COMMIT``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from transfer_platform.core.sql import quote_ident
from transfer_platform.destinations.sql.dialect import STATUS_TABLE, Dialect, Statement, StatusTypes

if TYPE_CHECKING:
    from transfer_platform.config.models import ColumnConfig, ModelConfig

__all__ = ["LOCK_TABLE", "STAGE", "STATUS_TABLE", "SnowflakeDialect"]

#: the models' lock rows and the named stage the windows' Parquet files pass through
LOCK_TABLE = "_transfer_locks"
STAGE = "_tp_stage"
#: what the catalog's ``DATA_TYPE`` (with precision and scale for NUMBER) reads back per declared type
_READ_BACK = {"VARCHAR": "TEXT", "TIMESTAMP_TZ(6)": "TIMESTAMP_TZ"}


def q(name: str) -> str:
    return quote_ident(name)


def literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class SnowflakeDialect(Dialect):
    vendor = "snowflake"
    status_types = StatusTypes("VARCHAR NOT NULL", "TIMESTAMP_TZ(6)", "VARCHAR", "VARCHAR",
                               more=("PRIMARY KEY (data_model_name)",))
    transactional_ddl = False  # each DDL statement commits: a refresh is published between commits
    now = "CURRENT_TIMESTAMP()"
    row_lock = ""  # no SELECT ... FOR UPDATE: the model's lock row keeps writers apart
    placeholder: ClassVar[str] = "%s"

    def __init__(self, database: str = "") -> None:
        self.database = database

    # -- names and types ---------------------------------------------------------------------

    def quote(self, name: str) -> str:
        return q(name)

    def qualified(self, container: str, name: str) -> str:
        return f"{q(self.database)}.{q(container)}.{q(name)}"

    @property
    def catalog(self) -> str:
        return f"{q(self.database)}.INFORMATION_SCHEMA"

    def matches(self, declared: str, actual: str) -> bool:
        return _READ_BACK.get(declared, declared) == actual

    def marked(self, column: str, data_type: str, alias: str | None = None) -> str:
        ref = (f"{alias}." if alias else "") + q(column)
        return f"COALESCE({ref}, FALSE)" if data_type == "boolean" else f"{ref} IS NOT NULL"

    def staged_type(self, column: ColumnConfig) -> str:
        """A staging column's type: the model's, but JSON as text (Parquet holds it as a string,
        which a VARIANT column would keep as a JSON string; it is parsed in the merge)."""
        return "VARCHAR" if column.data_type == "json" else self.column_type(column)

    def staged_value(self, column: ColumnConfig, alias: str) -> str:
        ref = f"{alias}.{q(column.destination_name)}"
        return f"PARSE_JSON({ref})" if column.data_type == "json" else ref

    # -- the catalog ---------------------------------------------------------------------------

    def table_exists(self, container: str, name: str) -> Statement:
        return (f"SELECT count(*) > 0 FROM {self.catalog}.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (container, name))

    def columns(self, container: str, name: str) -> Statement:
        return ("SELECT COLUMN_NAME, CASE WHEN DATA_TYPE = 'NUMBER' THEN 'NUMBER(' || NUMERIC_PRECISION || ',' || "
                f"NUMERIC_SCALE || ')' ELSE DATA_TYPE END FROM {self.catalog}.COLUMNS WHERE TABLE_SCHEMA = %s "
                "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (container, name))

    def primary_key(self, container: str, name: str) -> Statement:
        """Snowflake keeps a table's primary key as metadata (not enforced); ``SHOW PRIMARY KEYS``
        lists it (its fifth column is the column's name)."""
        return f"SHOW PRIMARY KEYS IN TABLE {self.qualified(container, name)}"

    def tables_starting_with(self, container: str, prefix: str) -> Statement:
        return (f"SELECT TABLE_NAME FROM {self.catalog}.TABLES WHERE TABLE_SCHEMA = %s AND "
                "STARTSWITH(TABLE_NAME, %s)", (container, prefix))

    def schema_exists(self, container: str) -> Statement:
        return f"SELECT count(*) FROM {self.catalog}.SCHEMATA WHERE SCHEMA_NAME = %s", (container,)

    # -- tables ----------------------------------------------------------------------------------

    def lock_ddl(self, locks: str) -> str:
        return (f"CREATE TABLE IF NOT EXISTS {locks} (data_model_name VARCHAR NOT NULL, holder VARCHAR, "
                "expires_at TIMESTAMP_TZ(6), PRIMARY KEY (data_model_name))")

    def stage_ddl(self, stage: str) -> str:
        return f"CREATE STAGE IF NOT EXISTS {stage}"

    def staging_ddl(self, staging: str, target: str, model: ModelConfig, columns: Sequence[ColumnConfig] | None,
                    *, logged: bool) -> str:
        """Nullable columns, no key; a transient table (no Fail-safe: it lives for one window)."""
        cols = ", ".join(f"{q(c.destination_name)} {self.staged_type(c)}" for c in (columns or model.columns))
        return f"CREATE TRANSIENT TABLE {staging} ({cols})"

    def rename_tables(self, container: str, pairs: Sequence[tuple[str, str]]) -> list[str]:
        return [f"ALTER TABLE {table} RENAME TO {self.qualified(container, name)}" for table, name in pairs]

    # -- the status table's and the lock's rows ------------------------------------------------

    def ensure_status_row(self, status: str, model_name: str) -> Statement:
        return (f"INSERT INTO {status} (data_model_name) SELECT %s WHERE NOT EXISTS "
                f"(SELECT 1 FROM {status} WHERE data_model_name = %s)", (model_name, model_name))

    def ensure_lock_row(self, locks: str, model_name: str) -> Statement:
        return self.ensure_status_row(locks, model_name)

    def claim_lock(self, locks: str, model_name: str, holder: str, lease_seconds: int) -> Statement:
        """Take the model's lock when it is free, already ours, or its lease ran out (one UPDATE:
        Snowflake runs two UPDATEs of one table one after the other); one row changed: taken."""
        return (f"UPDATE {locks} SET holder = %s, expires_at = DATEADD(second, {int(lease_seconds)}, "
                "CURRENT_TIMESTAMP()) WHERE data_model_name = %s AND (holder IS NULL OR holder = %s OR "
                "expires_at < CURRENT_TIMESTAMP())", (holder, model_name, holder))

    def renew_lock(self, locks: str, model_name: str, holder: str, lease_seconds: int) -> Statement:
        """Extend our lease (inside a window's commit): no row changed means the lock was taken over."""
        return (f"UPDATE {locks} SET expires_at = DATEADD(second, {int(lease_seconds)}, CURRENT_TIMESTAMP()) "
                "WHERE data_model_name = %s AND holder = %s", (model_name, holder))

    def release_lock(self, locks: str, holder: str) -> Statement:
        return f"UPDATE {locks} SET holder = NULL, expires_at = NULL WHERE holder = %s", (holder,)

    def lock_holder(self, locks: str, model_name: str) -> Statement:
        return (f"SELECT holder, expires_at FROM {locks} WHERE data_model_name = %s", (model_name,))

    # -- a staged window -------------------------------------------------------------------------

    def put(self, path: str, stage: str, folder: str) -> str:
        """Upload local Parquet files (``path`` may end in a wildcard) to ``@stage/folder/``."""
        return f"PUT {literal('file://' + path)} @{stage}/{folder}/ AUTO_COMPRESS=FALSE OVERWRITE=TRUE PARALLEL=4"

    def copy_into(self, staging: str, stage: str, folder: str) -> str:
        """Load the window's files into its staging table by column name; the files are removed
        from the stage once loaded (``PURGE``)."""
        return (f"COPY INTO {staging} FROM @{stage}/{folder}/ FILE_FORMAT = (TYPE = PARQUET) "
                "MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE ON_ERROR = ABORT_STATEMENT PURGE = TRUE")

    def count_where(self, condition: str) -> str:
        return f"count_if({condition})"

    def table_size(self, container: str, name: str) -> Statement:
        return (f"SELECT COALESCE(BYTES, 0) FROM {self.catalog}.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (container, name))

    # -- the commit ------------------------------------------------------------------------------

    def soft_delete(self, target: str, staging: str, model: ModelConfig) -> str:
        """At the same last-modified value the delete wins."""
        lm, marker = q(model.last_modified.destination_name), model.deletion_marker
        join = _join(c.destination_name for c in model.primary_key)
        return (f"DELETE FROM {target} AS t USING {staging} AS s WHERE {join} "
                f"AND {self.marked(marker.destination_name, marker.data_type, 's')} AND s.{lm} >= t.{lm}")

    def upsert(self, target: str, staging: str, model: ModelConfig, skip: str | None) -> list[str]:
        """The merge on the key with the last-modified tie-break: a staged row replaces the
        delivered one when it is newer, or as new and different (NULL-safe); an older one never
        does; an append-only model only inserts new keys; ``skip``: staged rows left out."""
        keys = [c.destination_name for c in model.primary_key]
        lm = q(model.last_modified.destination_name)
        source = f"(SELECT * FROM {staging}" + (f" WHERE NOT ({skip}))" if skip else ")")
        names = ", ".join(q(c.destination_name) for c in model.columns)
        values = ", ".join(self.staged_value(c, "s") for c in model.columns)
        insert = (f"INSERT INTO {target} ({names}) SELECT {values} FROM {source} AS s WHERE NOT EXISTS "
                  f"(SELECT 1 FROM {target} AS t WHERE {_join(keys)})")
        if model.is_append_only:
            return [insert]
        compared = [c for c in model.columns if c.destination_name not in keys and not c.is_last_modified]
        differs = " OR ".join(f"t.{q(c.destination_name)} IS DISTINCT FROM {self.staged_value(c, 's')}"
                              for c in compared)
        condition = f"s.{lm} > t.{lm}" + (f" OR (s.{lm} = t.{lm} AND ({differs}))" if compared else "")
        updated = [c for c in model.columns if c.destination_name not in keys]
        sets = ", ".join(f"{q(c.destination_name)} = {self.staged_value(c, 's')}" for c in updated)
        update = f"UPDATE {target} AS t SET {sets} FROM {source} AS s WHERE {_join(keys)} AND ({condition})"
        return [update, insert]

    def delete_matching(self, target: str, staging: str, columns: Sequence[str]) -> str:
        return f"DELETE FROM {target} AS t USING {staging} AS s WHERE {_join(columns)}"

    def replace_rows(self, target: str, aside: str, model: ModelConfig) -> list[str]:
        """A full refresh published as DML, inside one transaction: the live table's rows become
        the ones built aside."""
        names = ", ".join(q(c.destination_name) for c in model.columns)
        return [f"DELETE FROM {target}", f"INSERT INTO {target} ({names}) SELECT {names} FROM {aside}"]


def _join(keys) -> str:
    return " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in keys)
