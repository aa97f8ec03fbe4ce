"""The model columns of every data type that the destinations' type tests deliver: a source table
of the events shape with one column of each type beside the key, the tenant and the last-modified
value."""

from __future__ import annotations

#: the events columns, a text payload and one column of each other type (MySQL's, ClickHouse's and
#: Snowflake's tests: :func:`create_every_type_source` makes their source table)
EVERY_TYPE_COLUMNS = [
    {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
    {"name_in_source": "organization_id", "data_type": "string"},
    {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
    {"name_in_source": "payload", "data_type": "string"},
    {"name_in_source": "amount", "data_type": "decimal"},
    {"name_in_source": "doc", "data_type": "json"},
    {"name_in_source": "born", "data_type": "date"},
    {"name_in_source": "flag", "data_type": "boolean"},
    {"name_in_source": "ratio", "data_type": "float"},
]

#: the same types in another order, a text ``note`` for the payload (DuckDB's, GCS's and SFTP's
#: tests, whose rows are written in this order)
TYPED_COLUMNS = [
    {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
    {"name_in_source": "organization_id", "data_type": "string"},
    {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
    {"name_in_source": "amount", "data_type": "decimal"},
    {"name_in_source": "doc", "data_type": "json"},
    {"name_in_source": "note", "data_type": "string"},
    {"name_in_source": "flag", "data_type": "boolean"},
    {"name_in_source": "ratio", "data_type": "float"},
    {"name_in_source": "born", "data_type": "date"},
]


def create_every_type_source(conn, schema: str) -> str:
    """The source table of :data:`EVERY_TYPE_COLUMNS` in ``schema`` (PostgreSQL); returns ``schema``."""
    conn.execute(f'CREATE TABLE "{schema}".events (id bigint, organization_id text, updated_at timestamptz, '
                 "payload text, amount numeric(38,9), doc text, born date, flag boolean, ratio double precision)")
    return schema
