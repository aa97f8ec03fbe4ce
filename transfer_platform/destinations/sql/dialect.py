"""What a SQL destination's vendor says in its own SQL: :class:`Dialect`, the text of every
statement :class:`~transfer_platform.destinations.sql.writer.SqlWriter` runs, planned without a
database (each is tested as text).

A statement is text, or ``(text, parameters)`` in the driver's own placeholder style (the dialect
and its session adapter agree on it). Table arguments are qualified names already quoted
(:meth:`Dialect.qualified`); column names are quoted here. A subclass that leaves a statement
unimplemented is refused when it is defined (at import), naming itself and what it lacks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Union

from transfer_platform.core.sql import plan_soft_delete, plan_upsert
from transfer_platform.vendors import DESTINATIONS

if TYPE_CHECKING:
    from transfer_platform.config.models import ColumnConfig, ModelConfig

#: a statement: its text, or its text and parameters (a sequence, or a mapping of names)
Statement = Union[str, tuple[str, Union[Sequence[Any], Mapping[str, Any]]]]  # noqa: UP007 (a runtime alias)

#: the tables a writer keeps beside the models' in the recipient's schema or database
STATUS_TABLE = "_transfer_status"
LOCKS_TABLE = "_transfer_locks"  # the models' lock rows, where the vendor has no lock of its own
STAGING_PREFIX = "_tp_stg_"
REFRESH_PREFIX = "_tp_refresh_"
OLD_PREFIX = "_tp_old_"


#: the status table's state columns (``published_state``: a refresh renamed into place whose state
#: is not recorded yet; only a dialect without transactional DDL has it)
STATE_COLUMNS = ("state", "refresh_state", "published_state")


def backticked(name: str) -> str:
    """An identifier as BigQuery and ClickHouse quote it: in backticks, a backslash escaping."""
    if "\x00" in name:
        raise ValueError("identifiers cannot contain NUL characters")
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def backslashed(text: str) -> str:
    """A string literal as BigQuery and ClickHouse write it: in quotes, a backslash escaping."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\r", "\\r") + "'"


class StatusTypes(NamedTuple):
    """The types of ``_transfer_status``'s columns in one vendor's SQL (:meth:`Dialect.status_ddl`)."""

    key: str  # data_model_name's, its key clause included where it is inline
    timestamp: str
    state: str  # a state's (JSON, or text)
    text: str
    updated_at: str | None = None  # updated_at's, when not ``timestamp``
    more: tuple[str, ...] = ()  # what follows the columns inside the parentheses
    options: str = ""  # what follows the parentheses


def statement(method: Callable) -> Callable:
    """Mark a method of :class:`Dialect` as one every dialect implements."""
    method.__statement__ = True  # pyright: ignore[reportFunctionMemberAccess]
    return method


def state_column(column: str) -> str:
    if column not in STATE_COLUMNS:
        raise ValueError(f"not a state column: {column!r}")
    return column


class Dialect:
    """One vendor's SQL. ``vendor`` names its record in ``transfer_platform/vendors/`` (whose
    ``column_types`` give the model's types)."""

    #: the statements, found at class creation (methods marked :func:`statement`)
    STATEMENTS: ClassVar[tuple[str, ...]] = ()
    vendor: ClassVar[str]
    #: DDL inside a transaction commits with it (PostgreSQL, DuckDB); without it (MySQL), a full
    #: refresh is published in two commits around a rename (``published_state``, see the writer)
    transactional_ddl: ClassVar[bool] = True
    #: the driver's parameter placeholder; what reads a state as text, what writes text as JSON;
    #: the current time; what locks a row read until the transaction ends
    placeholder: ClassVar[str] = "%s"
    as_text: ClassVar[str] = ""
    as_json: ClassVar[str] = ""
    now: ClassVar[str] = "now()"
    row_lock: ClassVar[str] = " FOR UPDATE"
    #: ``_transfer_status``'s column types (a vendor whose state is kept elsewhere overrides
    #: :meth:`status_ddl` instead)
    status_types: ClassVar[StatusTypes]

    def __init_subclass__(cls, *, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if abstract:
            return
        missing = [name for name in Dialect.STATEMENTS if getattr(getattr(cls, name), "__statement__", False)]
        if missing:
            raise TypeError(f"SQL dialect {cls.__module__}.{cls.__qualname__} does not implement "
                            f"{', '.join(missing)} (the statements of transfer_platform.destinations.sql."
                            "dialect.Dialect)")

    # -- names and types -------------------------------------------------------------------------

    @statement
    def quote(self, name: str) -> str:
        """An identifier quoted."""
        raise NotImplementedError

    def qualified(self, container: str, name: str) -> str:
        """A table ``name`` in the schema or database ``container``, quoted."""
        return f"{self.quote(container)}.{self.quote(name)}"

    def column_type(self, column: ColumnConfig) -> str:
        """The type of a model column, as the catalog reads it back (see :meth:`matches`)."""
        return DESTINATIONS[self.vendor].column_types[column.data_type]

    def matches(self, declared: str, actual: str) -> bool:
        """Whether a column the catalog reads back as ``actual`` is of the type ``declared``."""
        return declared == actual

    def marked(self, column: str, data_type: str, alias: str | None = None) -> str:
        """The condition that a row is marked deleted (a boolean marker true, a timestamp one set)."""
        ref = (f"{alias}." if alias else "") + self.quote(column)
        return f"{ref} IS TRUE" if data_type == "boolean" else f"{ref} IS NOT NULL"

    # -- the catalog: one row per table or column ------------------------------------------------

    @statement
    def table_exists(self, container: str, name: str) -> Statement:
        """One row whose first value is true when the table exists (creating nothing)."""
        raise NotImplementedError

    @statement
    def columns(self, container: str, name: str) -> Statement:
        """(column name, type) per column, in order; no row if the table does not exist."""
        raise NotImplementedError

    @statement
    def primary_key(self, container: str, name: str) -> Statement:
        """(column name,) per primary-key column, sorted by name."""
        raise NotImplementedError

    @statement
    def tables_starting_with(self, container: str, prefix: str) -> Statement:
        """(table name,) per table of ``container`` whose name starts with ``prefix``."""
        raise NotImplementedError

    def table_size(self, container: str, name: str) -> Statement | None:
        """One row: the table's size in bytes (``None``: the batch summary has it)."""
        return None

    # -- tables ----------------------------------------------------------------------------------

    def status_ddl(self, status: str) -> str:
        """``_transfer_status`` created if missing: data_model_name (key), transfer_last_updated_at,
        high_watermark, state, refresh_state (and published_state without transactional DDL),
        last_transfer_id, updated_at; of the types :attr:`status_types` names."""
        types = self.status_types
        states = [c for c in STATE_COLUMNS if c != "published_state" or not self.transactional_ddl]
        columns = [f"data_model_name {types.key}", f"transfer_last_updated_at {types.timestamp}",
                   f"high_watermark {types.timestamp}", *(f"{c} {types.state}" for c in states),
                   f"last_transfer_id {types.text}", f"updated_at {types.updated_at or types.timestamp}", *types.more]
        return f"CREATE TABLE IF NOT EXISTS {status} ({', '.join(columns)}){types.options}"

    def target_ddl(self, table: str, model: ModelConfig) -> str:
        """The model's table created if missing: its columns and primary key."""
        columns = ", ".join(f"{self.quote(c.destination_name)} {self.column_type(c)}" for c in model.columns)
        key = ", ".join(self.quote(c.destination_name) for c in model.primary_key)
        return f"CREATE TABLE IF NOT EXISTS {table} ({columns}, PRIMARY KEY ({key}))"

    @statement
    def staging_ddl(self, staging: str, target: str, model: ModelConfig, columns: Sequence[ColumnConfig] | None,
                    *, logged: bool) -> str:
        """An empty staging table of ``columns`` (``None``: all of ``target``'s, which are the
        model's), nullable, without a key (the checks name a NULL or duplicate key); ``logged``
        when it may become the target."""
        raise NotImplementedError

    def has_rows(self, table: str) -> str:
        """One row, one column: 1 if ``table`` holds a row, else 0 (one row read at most)."""
        return f"SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT 1) AS one_row"

    def drop_table(self, table: str, *, if_exists: bool = True) -> str:
        return f"DROP TABLE {'IF EXISTS ' if if_exists else ''}{table}"

    def create_like(self, table: str, like: str) -> str:
        """A new empty table of ``like``'s definition, key included (``create-and-rename``'s fresh table)."""
        return f"CREATE TABLE {table} LIKE {like}"

    def dependents(self, container: str, name: str) -> Statement:
        """One row: how many objects (triggers, foreign keys) a table replaced by ``create-and-rename`` would lose."""
        raise NotImplementedError

    def alter_columns(self, table: str, added: Sequence[ColumnConfig], dropped: Sequence[str]) -> list[str]:
        """The statements that add ``added`` and drop ``dropped`` (run in one transaction)."""
        return ([f"ALTER TABLE {table} ADD COLUMN {self.quote(c.destination_name)} {self.column_type(c)}"
                 for c in added] + [f"ALTER TABLE {table} DROP COLUMN {self.quote(name)}" for name in dropped])

    def rename_tables(self, container: str, pairs: Sequence[tuple[str, str]]) -> list[str]:
        """Rename each (qualified table, new name in ``container``), in order; one atomic
        statement where the vendor has one."""
        return [f"ALTER TABLE {table} RENAME TO {self.quote(name)}" for table, name in pairs]

    # -- the status table's rows (values always parameters) ---------------------------------------

    def ensure_status_row(self, status: str, model_name: str) -> Statement:
        return f"INSERT INTO {status} (data_model_name) VALUES ({self.placeholder}) ON CONFLICT DO NOTHING", (
            model_name,)

    def read_states(self, status: str, model_name: str) -> Statement:
        """One row: state, refresh_state, published_state (NULL where the vendor has none), as text."""
        published = "NULL" if self.transactional_ddl else f"published_state{self.as_text}"
        return (f"SELECT state{self.as_text}, refresh_state{self.as_text}, {published} FROM {status} "
                f"WHERE data_model_name = {self.placeholder}", (model_name,))

    def read_state(self, status: str, column: str, model_name: str, *, for_update: bool = False) -> Statement:
        """One row: ``column`` as text (its row locked until the transaction ends: ``for_update``)."""
        return (f"SELECT {state_column(column)}{self.as_text} FROM {status} WHERE data_model_name = "
                f"{self.placeholder}{self.row_lock if for_update else ''}", (model_name,))

    def record_state(self, status: str, model_name: str, watermark: Any, high_watermark: Any, state_json: str,
                     transfer_id: str) -> Statement:
        p = self.placeholder
        return self.update_status(status, model_name, f"transfer_last_updated_at = {p}, high_watermark = {p}, state = "
                                  f"{p}{self.as_json}, last_transfer_id = {p}, updated_at = {self.now}",
                                  (watermark, high_watermark, state_json, transfer_id))

    def set_state_column(self, status: str, column: str, model_name: str, state_json: str | None) -> Statement:
        return self.update_status(status, model_name, f"{state_column(column)} = {self.placeholder}{self.as_json}",
                                  (state_json,))

    def update_status(self, status: str, model_name: str, sets: str, params: Sequence[Any]) -> Statement:
        """``sets`` (of ``params``) on the model's row: one ``UPDATE`` (BigQuery's emulator: a ``MERGE``)."""
        return f"UPDATE {status} SET {sets} WHERE data_model_name = {self.placeholder}", (*params, model_name)

    # -- a staged window -------------------------------------------------------------------------

    def batch_summary(self, model: ModelConfig, staging: str, high_watermark: Any) -> Statement:
        """One scan of a staged batch, one row: rows, rows newer than ``high_watermark``, the
        greatest last-modified value, rows with a NULL key, rows with a NULL last-modified value,
        rows marked deleted newer than ``high_watermark`` (all of them when it is ``None``), and
        the staging table's size in bytes (or NULL: :meth:`table_size` has it). In the vendor's
        words: :meth:`count_where`, :meth:`watermark_parameter`, :meth:`staged_size`."""
        lm = self.quote(model.last_modified.destination_name)
        hw = self.watermark_parameter(model.last_modified)
        null_key = " OR ".join(f"{self.quote(c.destination_name)} IS NULL" for c in model.primary_key)
        marker = model.deletion_marker
        flagged = "false" if marker is None else self.marked(marker.destination_name, marker.data_type)
        size, size_parameters = self.staged_size(staging)
        count = self.count_where
        text = (f"SELECT count(*), {count(f'{lm} > {hw}')}, max({lm}), {count(null_key)}, {count(f'{lm} IS NULL')}, "
                f"{count(f'{flagged} AND ({lm} > {hw} OR {hw} IS NULL)')}, {size} FROM {staging}")
        if hw == self.placeholder:  # positional: the value at each of its three uses
            return text, (high_watermark,) * 3
        return text, {"hw": high_watermark, **size_parameters}

    def count_where(self, condition: str) -> str:
        """The aggregate counting the rows where ``condition`` holds."""
        return f"count(*) FILTER (WHERE {condition})"

    def watermark_parameter(self, column: ColumnConfig) -> str:
        """The high watermark in :meth:`batch_summary`'s text: the named parameter ``hw`` in the
        driver's style, or the positional placeholder (the default)."""
        return self.placeholder

    def staged_size(self, staging: str) -> tuple[str, dict[str, Any]]:
        """The staging table's size in bytes in :meth:`batch_summary` (and its named parameters);
        ``NULL``: :meth:`table_size` reads it from the catalog."""
        return "NULL", {}

    def first_key_where_null(self, staging: str, keys: Sequence[str], column: str) -> str:
        """The key of one staged row whose ``column`` is NULL (to name it in the error)."""
        key_sql = ", ".join(self.quote(k) for k in keys)
        return f"SELECT {key_sql} FROM {staging} WHERE {self.quote(column)} IS NULL LIMIT 1"

    def first_duplicate_key(self, staging: str, keys: Sequence[str]) -> str:
        """One key staged more than once, with its count."""
        key_sql = ", ".join(self.quote(k) for k in keys)
        return f"SELECT {key_sql}, count(*) FROM {staging} GROUP BY {key_sql} HAVING count(*) > 1 LIMIT 1"

    def delete_where(self, table: str, condition: str) -> str:
        return f"DELETE FROM {table} WHERE {condition}"

    def soft_delete(self, target: str, staging: str, model: ModelConfig) -> str:
        """Remove the target rows the staging table marks deleted, unless the delivered row is
        newer (at the same last-modified value the delete wins); its row count is the rows removed."""
        marker = model.deletion_marker
        return plan_soft_delete(target=target, staging=staging, primary_key=[c.destination_name for c in model.primary_key],
                                last_modified=model.last_modified.destination_name,
                                marker=marker.destination_name,  # pyright: ignore[reportOptionalMemberAccess]
                                marker_type=marker.data_type)  # pyright: ignore[reportOptionalMemberAccess]

    def upsert(self, target: str, staging: str, model: ModelConfig, skip: str | None) -> list[str]:
        """Merge the staged rows on the primary key (``INSERT ... ON CONFLICT (key) DO UPDATE ...
        WHERE``): a newer row, or an equally new one that differs, replaces the delivered one; an
        older one never does; an ``is_append_only`` model only inserts new keys; ``skip``: staged
        rows left out."""
        return [plan_upsert(target=target, staging=staging, columns=[c.destination_name for c in model.columns],
                            primary_key=[c.destination_name for c in model.primary_key],
                            last_modified=model.last_modified.destination_name,
                            append_only=model.is_append_only, skip=skip)]

    def delete_matching(self, target: str, staging: str, columns: Sequence[str]) -> str:
        """Delete the target rows equal to a staged row on every one of ``columns`` (the sweep)."""
        match = " AND ".join(f"t.{self.quote(c)} = s.{self.quote(c)}" for c in columns)
        return f"DELETE FROM {target} AS t USING {staging} AS s WHERE {match}"

    def read_rows(self, table: str, columns: Sequence[ColumnConfig]) -> str:
        """The table's rows, ``columns`` in order (the writer's ``read_table``)."""
        return f"SELECT {', '.join(self.quote(c.destination_name) for c in columns)} FROM {table}"


Dialect.STATEMENTS = tuple(name for name, value in vars(Dialect).items() if getattr(value, "__statement__", False))
