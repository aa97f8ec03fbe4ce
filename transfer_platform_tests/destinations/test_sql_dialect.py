"""What every SQL destination's dialect must do, without a database: every statement of the SQL
writer's algorithm written (a dialect leaving one out is refused at import, naming it),
identifiers quoted, values passed as parameters, and only the status table's state columns named."""

from __future__ import annotations

import pytest

from transfer_platform.config.models import ColumnConfig, ModelConfig
from transfer_platform.destinations.sql.dialect import Dialect
from transfer_platform.destinations.sql.writer import SqlWriter
from transfer_platform.vendors import DESTINATIONS

SQL_VENDORS = [v for v in DESTINATIONS.values() if issubclass(v.implementation(), SqlWriter)]
TRICKY = 'ev"en`ts'  # a column or schema name from the configuration, with both quote characters


def model() -> ModelConfig:
    return ModelConfig(model_name="events", source_name="src", source_table="t", columns=[
        ColumnConfig(name_in_source="id", data_type="integer", is_primary_key=True),
        ColumnConfig(name_in_source="updated_at", data_type="timestamp", is_last_modified=True),
        ColumnConfig(name_in_source="deleted", data_type="boolean", is_deleted_marker=True),
        ColumnConfig(name_in_source=TRICKY, data_type="string")])


def test_the_sql_destinations_are_postgres_mysql_and_duckdb() -> None:
    assert {v.name for v in SQL_VENDORS} >= {"postgres", "mysql", "duckdb"}


def test_a_dialect_without_a_statement_is_refused_when_defined_naming_it() -> None:
    with pytest.raises(TypeError) as refused:
        class HalfDone(Dialect):  # every statement but the staging table
            vendor = "postgres"

            def quote(self, name): ...
            def table_exists(self, container, name): ...
            def columns(self, container, name): ...
            def primary_key(self, container, name): ...
            def tables_starting_with(self, container, prefix): ...
            def status_ddl(self, status): ...
            def target_ddl(self, table, model): ...
            def alter_columns(self, table, added, dropped): ...
            def rename_tables(self, container, pairs): ...

    message = str(refused.value)
    assert "HalfDone" in message
    assert "staging_ddl" in message
    assert "batch_summary" not in message  # written once, from count_where and watermark_parameter
    assert "target_ddl" not in message
    assert "upsert" not in message  # a default: INSERT ... ON CONFLICT


@pytest.mark.parametrize("vendor", SQL_VENDORS, ids=lambda v: v.name)
def test_each_writer_has_its_vendors_dialect_and_every_statement(vendor) -> None:
    dialect = vendor.implementation().DIALECT
    assert dialect.vendor == vendor.name
    assert not [s for s in Dialect.STATEMENTS if getattr(getattr(type(dialect), s), "__statement__", False)]


@pytest.mark.parametrize("vendor", SQL_VENDORS, ids=lambda v: v.name)
def test_names_are_quoted_and_values_are_parameters(vendor) -> None:
    dialect = vendor.implementation().DIALECT
    status, table, staging = (dialect.qualified("s", n) for n in ("_transfer_status", TRICKY, "_tp_stg_x"))
    assert dialect.quote(TRICKY) in table
    for text in [dialect.target_ddl(table, model()), *dialect.upsert(table, staging, model(), None),
                 dialect.soft_delete(table, staging, model()), dialect.delete_matching(table, staging, [TRICKY]),
                 *dialect.alter_columns(table, model().columns[3:], [TRICKY])]:
        assert dialect.quote(TRICKY) in text
        assert TRICKY not in text.replace(dialect.quote(TRICKY), "")  # never unquoted
    for statement in (dialect.ensure_status_row(status, "events"), dialect.read_states(status, "events"),
                      dialect.read_state(status, "refresh_state", "events", for_update=True),
                      dialect.set_state_column(status, "refresh_state", "events", '{"a": 1}'),
                      dialect.record_state(status, "events", None, None, '{"a": 1}', "t'1")):
        text, params = statement
        assert "events" in params  # the model's name, its state and the transfer id: parameters
        for value in ("events", "t'1", '{"a": 1}'):
            assert value not in text


@pytest.mark.parametrize("vendor", SQL_VENDORS, ids=lambda v: v.name)
def test_the_batch_summary_scans_seven_values_with_the_high_watermark_a_parameter(vendor) -> None:
    dialect = vendor.implementation().DIALECT
    staging = dialect.qualified("s", "_tp_stg_x")
    text, params = dialect.batch_summary(model(), staging, "HW")
    assert text.startswith("SELECT count(*), ")
    assert text.endswith(f" FROM {staging}")
    assert dialect.marked("deleted", "boolean") in text
    assert "HW" not in text
    assert list(params.values() if isinstance(params, dict) else params).count("HW") == (
        1 if isinstance(params, dict) else 3)


@pytest.mark.parametrize("vendor", SQL_VENDORS, ids=lambda v: v.name)
def test_the_status_table_has_every_state_column_its_publish_needs(vendor) -> None:
    dialect = vendor.implementation().DIALECT
    if "status_types" not in vars(type(dialect)):
        pytest.skip(f"{vendor.name} keeps its state elsewhere (its status_ddl is its own)")
    ddl = dialect.status_ddl(dialect.qualified("s", "_transfer_status"))
    for column in ("data_model_name", "transfer_last_updated_at", "high_watermark", "state ", "refresh_state",
                   "last_transfer_id", "updated_at"):
        assert column in ddl
    assert ("published_state" in ddl) is not dialect.transactional_ddl


@pytest.mark.parametrize("vendor", SQL_VENDORS, ids=lambda v: v.name)
def test_only_the_status_tables_state_columns_can_be_named(vendor) -> None:
    dialect = vendor.implementation().DIALECT
    for bad in ("state; DROP TABLE x", "data_model_name"):
        with pytest.raises(ValueError, match="not a state column"):
            dialect.read_state('"s"."_transfer_status"', bad, "m")
        with pytest.raises(ValueError, match="not a state column"):
            dialect.set_state_column('"s"."_transfer_status"', bad, "m", None)


@pytest.mark.parametrize("vendor", SQL_VENDORS, ids=lambda v: v.name)
def test_a_declared_empty_table_load_has_its_publish_step_and_only_then(vendor) -> None:
    writer = vendor.implementation()
    publishes = writer._publish_empty_load is not SqlWriter._publish_empty_load
    assert publishes is (vendor.empty_table_load is not None), (
        f"{vendor.name} declares empty_table_load={vendor.empty_table_load!r}: its writer must "
        "give _publish_empty_load exactly when it declares one")


def test_the_empty_table_loads_declared() -> None:
    declared = {v.name: v.empty_table_load for v in SQL_VENDORS}
    assert {k: declared[k] for k in ("postgres", "mysql", "snowflake", "clickhouse", "duckdb", "bigquery")} == {
        "postgres": "swap", "mysql": "create-and-rename", "snowflake": "copy-into",
        "clickhouse": "clone-and-exchange", "duckdb": None, "bigquery": None}


@pytest.mark.parametrize("vendor", SQL_VENDORS, ids=lambda v: v.name)
def test_a_sql_writer_keeps_the_state_in_the_store_its_record_chooses(vendor) -> None:
    from transfer_platform.destinations.sql.state import STATE_STORES

    assert vendor.state_store in STATE_STORES
    assert (vendor.state_store == "table comment") is (vendor.name == "clickhouse")
