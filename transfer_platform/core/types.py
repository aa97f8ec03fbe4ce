"""The model's column types and what each becomes in Spark and Arrow (a destination's own type
names are in its vendor record: ``vendors/``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ColumnType:
    name: str
    spark: str  # Spark SQL DDL type name (for casts)
    arrow: str  # a pyarrow type factory call, resolved by the destination that needs it


TYPES: dict[str, ColumnType] = {
    t.name: t
    for t in (
        ColumnType("string", "string", "string"),
        ColumnType("integer", "bigint", "int64"),
        ColumnType("float", "double", "float64"),
        ColumnType("boolean", "boolean", "bool"),
        ColumnType("timestamp", "timestamp", "timestamp_us_utc"),
        ColumnType("date", "date", "date32"),
        ColumnType("decimal", "decimal(38,9)", "decimal_38_9"),
        ColumnType("json", "string", "string"),
    )
}

ALIASES: dict[str, str] = {
    "text": "string",
    "varchar": "string",
    "int": "integer",
    "bigint": "integer",
    "long": "integer",
    "double": "float",
    "bool": "boolean",
    "timestamptz": "timestamp",
    "datetime": "timestamp",
    "numeric": "decimal",
    "jsonb": "json",
}


def canonical_type(name: str) -> str:
    """``'BIGINT'`` -> ``'integer'``; raises ``ValueError`` listing the allowed names."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in TYPES:
        allowed = ", ".join(sorted(TYPES))
        raise ValueError(f"unknown data_type {name!r}; allowed: {allowed} (aliases: {', '.join(sorted(ALIASES))})")
    return key
