"""BigQuery's GoogleSQL for the SQL writer, planned without a server (docs/destinations.md). The
emulator the tests use takes no query parameters and has no ``UPDATE`` or ``DELETE``: values are
literals (substituted for each ``%s`` by the session) and rows are written by ``MERGE``, one atomic
statement each, the same text on BigQuery. Tables are ```project`.`dataset`.`table```; a window is
staged as text and read typed through :meth:`BigqueryDialect.decoded`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from transfer_platform.destinations.sql.dialect import Dialect, Statement, StatusTypes
from transfer_platform.destinations.sql.dialect import backticked as q

if TYPE_CHECKING:
    from transfer_platform.config.models import ColumnConfig, ModelConfig

#: how a table is read back exactly: JSON as its text, NUMERIC as text
_READ = {"json": "TO_JSON_STRING({x})", "decimal": "CAST({x} AS STRING)"}
#: the legacy type names the tables API answers, as GoogleSQL names them
_LEGACY = {"INTEGER": "INT64", "FLOAT": "FLOAT64", "BOOLEAN": "BOOL"}


def _same(column: ColumnConfig) -> str:
    name = q(column.destination_name)
    if column.data_type == "json":  # JSON values do not compare: their canonical text does
        return f"TO_JSON_STRING(t.{name}) IS NOT DISTINCT FROM TO_JSON_STRING(s.{name})"
    return f"t.{name} IS NOT DISTINCT FROM s.{name}"


def _on(keys: Sequence[str]) -> str:
    return " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in keys)


class BigqueryDialect(Dialect):
    vendor = "bigquery"
    status_types = StatusTypes("STRING", "TIMESTAMP", "STRING", "STRING", more=("primary_key STRING",))
    now = "CURRENT_TIMESTAMP()"
    row_lock = ""  # no row locks: the model's lock row keeps writers apart (the writer)

    quote = staticmethod(q)

    def qualified(self, container: str, name: str) -> str:  # a project id may hold a dot, a dataset not
        return ".".join(q(part) for part in (*container.rsplit(".", 1), name))

    def matches(self, declared: str, actual: str) -> bool:
        return declared == _LEGACY.get(actual.upper(), actual.upper())

    def _catalog(self, container: str, name: str) -> Statement:
        raise NotImplementedError("the writer reads BigQuery's catalog through the tables API (the emulator "
                                  "has no INFORMATION_SCHEMA, and the API costs no query job)")

    table_exists = columns = primary_key = tables_starting_with = _catalog

    def locks_ddl(self, locks: str) -> str:
        return f"CREATE TABLE IF NOT EXISTS {locks} (model_name STRING, holder STRING, expires_at TIMESTAMP)"

    def target_ddl(self, table: str, model: ModelConfig) -> str:  # no PRIMARY KEY: BigQuery enforces none
        columns = ", ".join(f"{q(c.destination_name)} {self.column_type(c)}" for c in model.columns)
        return f"CREATE TABLE IF NOT EXISTS {table} ({columns})"

    def staging_ddl(self, staging: str, target: str, model: ModelConfig | None,
                    columns: Sequence[ColumnConfig] | None, *, logged: bool) -> str:
        names = [q(c.destination_name) for c in columns or model.columns]  # the CSV's text: read by decoded
        return f"CREATE TABLE {staging} ({', '.join(f'{n} STRING' for n in names)})"

    def decoded(self, raw: str, columns: Sequence[ColumnConfig]) -> str:
        def typed(c: ColumnConfig) -> str:
            x = q(c.destination_name)
            text = f"JSON_VALUE({x}, '$')"  # a string or a JSON value is staged as a JSON string literal
            return {"string": text, "json": f"PARSE_JSON({text})"}.get(c.data_type,
                                                                      f"CAST({x} AS {self.column_type(c)})")
        return f"(SELECT {', '.join(f'{typed(c)} AS {q(c.destination_name)}' for c in columns)} FROM {raw})"

    def alter_columns(self, table: str, added: Sequence[ColumnConfig], dropped: Sequence[str]) -> list[str]:
        """A dropped column removed by rewriting the table (the emulator has no ``DROP COLUMN``)."""
        drop = f"CREATE OR REPLACE TABLE {table} AS SELECT * EXCEPT ({', '.join(q(n) for n in dropped)}) FROM {table}"
        return super().alter_columns(table, added, []) + ([drop] if dropped else [])

    def replace_table(self, table: str, source: str) -> str:
        return f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM {source}"

    def read_rows(self, table: str, columns: Sequence[ColumnConfig]) -> str:
        cols = ", ".join(_READ.get(c.data_type, "{x}").format(x=q(c.destination_name)) for c in columns)
        return f"SELECT {cols} FROM {table}"

    # -- the status row: one MERGE each (the emulator has no UPDATE) ------------------------------

    def _status_merge(self, status: str, when: str) -> str:
        return (f"MERGE {status} AS t USING (SELECT %s AS data_model_name) AS s "
                f"ON t.data_model_name = s.data_model_name {when}")

    def ensure_status_row(self, status: str, model_name: str) -> Statement:
        return self._status_merge(status, "WHEN NOT MATCHED THEN INSERT (data_model_name, updated_at) "
                                          f"VALUES (s.data_model_name, {self.now})"), (model_name,)

    def update_status(self, status: str, model_name: str, sets: str, params: Sequence[Any]) -> Statement:
        return self._status_merge(status, f"WHEN MATCHED THEN UPDATE SET {sets}"), (model_name, *params)

    def read_primary_key(self, status: str, model_name: str) -> Statement:
        return f"SELECT primary_key FROM {status} WHERE data_model_name = %s", (model_name,)

    def record_primary_key(self, status: str, model_name: str, primary_key: str) -> Statement:
        """The model's row made if missing, ``primary_key`` recorded in it unless it holds one."""
        return self._status_merge(status, "WHEN MATCHED AND t.primary_key IS NULL THEN UPDATE SET primary_key = %s "
                                  "WHEN NOT MATCHED THEN INSERT (data_model_name, primary_key, updated_at) VALUES "
                                  f"(s.data_model_name, %s, {self.now})"), (model_name, primary_key, primary_key)

    def count_where(self, condition: str) -> str:
        return f"COUNTIF({condition})"

    def soft_delete(self, target: str, staging: str, model: ModelConfig) -> str:
        """The count of the rows :meth:`upsert` deletes with its rows, atomically."""
        lm, marker = q(model.last_modified.destination_name), model.deletion_marker
        return (f"SELECT COUNT(*) FROM {target} AS t JOIN {staging} AS s ON {_on(_keys(model))} WHERE "
                f"{self.marked(marker.destination_name, marker.data_type, 's')} AND s.{lm} >= t.{lm}")

    def upsert(self, target: str, staging: str, model: ModelConfig, skip: str | None) -> list[str]:
        """One ``MERGE`` on the key, rows and soft deletes in one atomic statement: a newer row, or an
        equally new one that differs, replaces the delivered one; an older one never does."""
        lm, marker = q(model.last_modified.destination_name), model.deletion_marker
        names = [q(c.destination_name) for c in model.columns]
        if skip:  # the base's condition names the staged row unaliased: here it is the MERGE's ``s``
            skip = self.marked(marker.destination_name, marker.data_type, "s")
        not_skipped = f" AND NOT ({skip})" if skip else ""
        clauses = []
        if skip and not model.is_append_only:
            clauses.append(f"WHEN MATCHED AND {skip} AND s.{lm} >= t.{lm} THEN DELETE")
        if not model.is_append_only:
            compared = [c for c in model.columns if not (c.is_primary_key or c.is_last_modified)]
            differs = f" OR (s.{lm} = t.{lm} AND NOT ({' AND '.join(_same(c) for c in compared)}))" if compared else ""
            sets = ", ".join(f"{n} = s.{n}" for n in names if n not in {q(k) for k in _keys(model)})
            clauses.append(f"WHEN MATCHED AND (s.{lm} > t.{lm}{differs}){not_skipped} THEN UPDATE SET {sets}")
        clauses.append(f"WHEN NOT MATCHED BY TARGET{not_skipped} THEN INSERT ({', '.join(names)}) "
                       f"VALUES ({', '.join('s.' + n for n in names)})")
        return [f"MERGE {target} AS t USING {staging} AS s ON {_on(_keys(model))} " + " ".join(clauses)]

    def delete_matching(self, target: str, staging: str, columns: Sequence[str]) -> str:
        return f"MERGE {target} AS t USING {staging} AS s ON {_on(columns)} WHEN MATCHED THEN DELETE"

    def claim_lock(self, locks: str, model_name: str, holder: str, ttl_seconds: int) -> Statement:
        """Taken when free, expired or ours; one ``MERGE``: two claims never both win."""
        expiry = f"TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL {int(ttl_seconds)} SECOND)"
        return (f"MERGE {locks} AS t USING (SELECT %s AS model_name) AS s ON t.model_name = s.model_name "
                "WHEN MATCHED AND (t.holder = %s OR t.expires_at < CURRENT_TIMESTAMP()) THEN "
                f"UPDATE SET holder = %s, expires_at = {expiry} WHEN NOT MATCHED THEN INSERT (model_name, holder, "
                f"expires_at) VALUES (s.model_name, %s, {expiry})", (model_name, holder, holder, holder))

    def lock_holder(self, locks: str, model_name: str) -> Statement:
        return f"SELECT holder, expires_at FROM {locks} WHERE model_name = %s", (model_name,)

    def release_lock(self, locks: str, model_name: str, holder: str) -> Statement:
        return (f"MERGE {locks} AS t USING (SELECT %s AS model_name, %s AS holder) AS s ON t.model_name = "
                "s.model_name AND t.holder = s.holder WHEN MATCHED THEN DELETE", (model_name, holder))


def _keys(model: ModelConfig) -> list[str]:
    return [c.destination_name for c in model.primary_key]
