"""The Snowflake destination's SQL, planned without a database: names quoted (Snowflake upper-cases
unquoted ones), tables named in full, parameters the connector's ``%s``. DDL commits, so a window's
commit is DML only: the merge is an ``UPDATE ... FROM`` and an ``INSERT ... WHERE NOT EXISTS``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from transfer_platform.core.sql import quote_ident as q
from transfer_platform.destinations.sql.dialect import Dialect, Statement, StatusTypes

if TYPE_CHECKING:
    from transfer_platform.config.models import ColumnConfig, ModelConfig

#: the named stage the windows' Parquet files pass through (the models' lock rows: ``LOCKS_TABLE``)
STAGE = "_tp_stage"
#: what the catalog's ``DATA_TYPE`` (with precision and scale for NUMBER) reads back per declared type
_READ_BACK = {"VARCHAR": "TEXT", "TIMESTAMP_TZ(6)": "TIMESTAMP_TZ"}
_LEASE = "expires_at = DATEADD(second, {}, CURRENT_TIMESTAMP())"  # a lease from now (claim_lock, renew_lock)


def _join(keys: Iterable[str]) -> str:
    return " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in keys)


class SnowflakeDialect(Dialect):
    vendor = "snowflake"
    status_types = StatusTypes("VARCHAR NOT NULL", "TIMESTAMP_TZ(6)", "VARCHAR", "VARCHAR",
                               more=("PRIMARY KEY (data_model_name)",))
    transactional_ddl = False  # each DDL statement commits: a refresh is published between commits
    now = "CURRENT_TIMESTAMP()"
    row_lock = ""  # no SELECT ... FOR UPDATE: the model's lock row keeps writers apart
    quote = staticmethod(q)

    def __init__(self, database: str = "") -> None:
        self.database = database

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

    def staged_value(self, column: ColumnConfig, alias: str) -> str:
        """JSON is staged as text (a VARIANT would keep Parquet's string as a JSON string), parsed here."""
        ref = f"{alias}.{q(column.destination_name)}"
        return f"PARSE_JSON({ref})" if column.data_type == "json" else ref

    def table_exists(self, container: str, name: str) -> Statement:
        return (f"SELECT count(*) > 0 FROM {self.catalog}.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (container, name))

    def columns(self, container: str, name: str) -> Statement:
        return ("SELECT COLUMN_NAME, CASE WHEN DATA_TYPE = 'NUMBER' THEN 'NUMBER(' || NUMERIC_PRECISION || ',' || "
                f"NUMERIC_SCALE || ')' ELSE DATA_TYPE END FROM {self.catalog}.COLUMNS WHERE TABLE_SCHEMA = %s "
                "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (container, name))

    def primary_key(self, container: str, name: str) -> Statement:
        """Kept as metadata (not enforced); the fifth column of ``SHOW PRIMARY KEYS`` names it."""
        return f"SHOW PRIMARY KEYS IN TABLE {self.qualified(container, name)}"

    def tables_starting_with(self, container: str, prefix: str) -> Statement:
        return (f"SELECT TABLE_NAME FROM {self.catalog}.TABLES WHERE TABLE_SCHEMA = %s AND "
                "STARTSWITH(TABLE_NAME, %s)", (container, prefix))

    def table_size(self, container: str, name: str) -> Statement:
        return (f"SELECT COALESCE(BYTES, 0) FROM {self.catalog}.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (container, name))

    def schema_exists(self, container: str) -> Statement:
        return f"SELECT count(*) FROM {self.catalog}.SCHEMATA WHERE SCHEMA_NAME = %s", (container,)

    def lock_ddl(self, locks: str) -> str:
        return (f"CREATE TABLE IF NOT EXISTS {locks} (data_model_name VARCHAR NOT NULL, holder VARCHAR, "
                "expires_at TIMESTAMP_TZ(6), PRIMARY KEY (data_model_name))")

    def stage_ddl(self, stage: str) -> str:
        return f"CREATE STAGE IF NOT EXISTS {stage}"

    def staging_ddl(self, staging: str, target: str, model: ModelConfig, columns: Sequence[ColumnConfig] | None,
                    *, logged: bool) -> str:
        """Nullable columns, no key, JSON as text; a transient table (no Fail-safe: it lives for one window)."""
        cols = ", ".join(f"{q(c.destination_name)} {'VARCHAR' if c.data_type == 'json' else self.column_type(c)}"
                         for c in (columns or model.columns))
        return f"CREATE TRANSIENT TABLE {staging} ({cols})"

    def rename_tables(self, container: str, pairs: Sequence[tuple[str, str]]) -> list[str]:
        return [f"ALTER TABLE {table} RENAME TO {self.qualified(container, name)}" for table, name in pairs]

    def ensure_status_row(self, status: str, model_name: str) -> Statement:
        return (f"INSERT INTO {status} (data_model_name) SELECT %s WHERE NOT EXISTS "
                f"(SELECT 1 FROM {status} WHERE data_model_name = %s)", (model_name, model_name))

    def claim_lock(self, locks: str, model_name: str, holder: str, lease_seconds: int) -> Statement:
        """Taken (one row changed) if free, ours or expired: one UPDATE, as Snowflake runs two of a table in turn."""
        return (f"UPDATE {locks} SET holder = %s, {_LEASE.format(int(lease_seconds))} WHERE data_model_name = %s "
                "AND (holder IS NULL OR holder = %s OR expires_at < CURRENT_TIMESTAMP())", (holder, model_name, holder))

    def renew_lock(self, locks: str, model_name: str, holder: str, lease_seconds: int) -> Statement:
        """Inside a window's commit: no row changed means the lock was taken over."""
        return (f"UPDATE {locks} SET {_LEASE.format(int(lease_seconds))} WHERE data_model_name = %s AND holder = %s",
                (model_name, holder))

    def release_lock(self, locks: str, holder: str) -> Statement:
        return f"UPDATE {locks} SET holder = NULL, expires_at = NULL WHERE holder = %s", (holder,)

    def lock_holder(self, locks: str, model_name: str) -> Statement:
        return f"SELECT holder, expires_at FROM {locks} WHERE data_model_name = %s", (model_name,)

    def put(self, path: str, stage: str, folder: str) -> str:
        """Upload local Parquet files (``path`` may end in a wildcard) to ``@stage/folder/``."""
        literal = "'file://" + path.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return f"PUT {literal} @{stage}/{folder}/ AUTO_COMPRESS=FALSE OVERWRITE=TRUE PARALLEL=4"

    def copy_into(self, table: str, stage: str, folder: str) -> str:
        """The folder's files loaded by column name, then removed from the stage (``PURGE``)."""
        return (f"COPY INTO {table} FROM @{stage}/{folder}/ FILE_FORMAT = (TYPE = PARQUET) "
                "MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE ON_ERROR = ABORT_STATEMENT PURGE = TRUE")

    def count_where(self, condition: str) -> str:
        return f"count_if({condition})"

    def soft_delete(self, target: str, staging: str, model: ModelConfig) -> str:
        """At the same last-modified value the delete wins."""
        lm, marker = q(model.last_modified.destination_name), model.deletion_marker
        keys = _join(c.destination_name for c in model.primary_key)
        return (f"DELETE FROM {target} AS t USING {staging} AS s WHERE {keys} "
                f"AND {self.marked(marker.destination_name, marker.data_type, 's')} AND s.{lm} >= t.{lm}")

    def upsert(self, target: str, staging: str, model: ModelConfig, skip: str | None) -> list[str]:
        """A staged row replaces the delivered one if newer, or as new and different; ``skip``: rows left out."""
        keys = [c.destination_name for c in model.primary_key]
        lm = q(model.last_modified.destination_name)
        source = f"(SELECT * FROM {staging}" + (f" WHERE NOT ({skip}))" if skip else ")")
        values = {q(c.destination_name): self.staged_value(c, "s") for c in model.columns}
        insert = (f"INSERT INTO {target} ({', '.join(values)}) SELECT {', '.join(values.values())} FROM {source} AS s "
                  f"WHERE NOT EXISTS (SELECT 1 FROM {target} AS t WHERE {_join(keys)})")
        if model.is_append_only:
            return [insert]
        updated = [c for c in model.columns if c.destination_name not in keys]
        differs = " OR ".join(f"t.{q(c.destination_name)} IS DISTINCT FROM {self.staged_value(c, 's')}"
                              for c in updated if not c.is_last_modified)
        condition = f"s.{lm} > t.{lm}" + (f" OR (s.{lm} = t.{lm} AND ({differs}))" if differs else "")
        sets = ", ".join(f"{q(c.destination_name)} = {self.staged_value(c, 's')}" for c in updated)
        return [f"UPDATE {target} AS t SET {sets} FROM {source} AS s WHERE {_join(keys)} AND ({condition})", insert]

    def replace_rows(self, target: str, aside: str, model: ModelConfig) -> list[str]:
        """A full refresh published as DML, in one transaction: the live rows become the aside's."""
        names = ", ".join(q(c.destination_name) for c in model.columns)
        return [f"DELETE FROM {target}", f"INSERT INTO {target} ({names}) SELECT {names} FROM {aside}"]
