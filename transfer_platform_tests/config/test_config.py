"""parse_config / load_config: a valid file passes, each mistake is reported with its path."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.config.parsing import ENV_VAR, find_config_path, parse_config
from transfer_platform.config.secrets import EnvRef
from transfer_platform.errors import ConfigError
from transfer_platform.transfers.preflight import secrets_needed
from transfer_platform.vendors.delta import DeltaDestination
from transfer_platform.vendors.mysql import MysqlSource
from transfer_platform.vendors.parquet import ParquetSource
from transfer_platform.vendors.postgres import PostgresSource
from transfer_platform_tests.support.config import NOW, problems_of, valid_raw

SECRET = "s3cr3t-hunter2-value"


# -- the valid file ----------------------------------------------------------------------------


def test_valid_config_parses():
    config = parse_config(valid_raw(), now=NOW)
    assert [type(s) for s in config.sources] == [PostgresSource, ParquetSource]
    assert isinstance(config.destinations[0], DeltaDestination)
    model = config.model("orders")
    assert [c.name_in_source for c in model.primary_key] == ["id"]
    assert model.last_modified.name_in_source == "updated_at"
    assert model.max_transfer_time_window_seconds == 86_400
    password = config.source("app_db").connection.password
    assert isinstance(password, EnvRef)
    assert password.env == "PG_PASSWORD"
    assert config.models_for(config.destinations[0]) == [model]
    # parse_config without base_dir leaves relative paths alone
    assert config.source("lake").connection.path == Path("lake")


def test_password_as_env_mapping():
    raw = valid_raw()
    raw["sources"][0]["connection"]["password"] = {"env": "PG_PASSWORD"}
    config = parse_config(raw, now=NOW)
    assert config.source("app_db").connection.password.env == "PG_PASSWORD"


def test_top_level_must_be_a_mapping():
    with pytest.raises(ConfigError) as info:
        parse_config(["not", "a", "mapping"], now=NOW)
    assert info.value.problems[0].path == "(top level)"


# -- refusals ----------------------------------------------------------------------------------


def _set(*path: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(raw: dict[str, Any]) -> None:
        target = raw
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


def _unknown_source(raw):
    raw["models"][0]["source_name"] = "no_such_db"


def _no_last_modified(raw):
    raw["models"][0]["columns"][2]["is_last_modified"] = False


def _two_last_modified(raw):
    raw["models"][0]["columns"].append(
        {"name_in_source": "created_at", "data_type": "timestamp", "is_last_modified": True})


def _last_modified(**fields):
    def change(raw):
        raw["models"][0]["columns"][2].update(fields)
    return change


def _text_last_modified_split_in_queries(raw):
    raw["sources"][0]["max_concurrent_queries_per_transfer"] = 4
    raw["models"][0]["columns"][2].update(data_type="string")


def _second_recipient(raw, destination):
    raw["recipients"].append({"name": "globex", "id_in_provider_system": "org_2"})
    raw["destinations"].append({"name": "globex_dst", "recipient": "globex", **destination})


def _same_delta_path(raw):
    _second_recipient(raw, {"vendor": "delta", "connection": {"path": "./out/"}})  # "out", spelt otherwise


def _same_postgres_schema(raw):
    raw["destinations"] = [{"name": "acme_pg", "vendor": "postgres", "recipient": "acme",
                            "connection": {"host": "localhost", "port": 5432, "database": "wh",
                                           "username": "u", "schema": "shared"}}]
    _second_recipient(raw, {"vendor": "postgres", "connection": {"host": "127.0.0.1", "port": 5432,
                                                                 "database": "wh", "username": "v",
                                                                 "schema": "shared"}})


def _format_on_another_column(raw):
    raw["models"][0]["columns"][1]["datetime_format"] = "%Y-%m-%d"


def _no_primary_key(raw):
    raw["models"][0]["columns"][0]["is_primary_key"] = False


def _no_organization_column(raw):
    del raw["models"][0]["organization_column"]


def _typo(raw):
    raw["models"][0]["max_transfer_time_windows_seconds"] = 60


def _unknown_vendor(raw):
    raw["sources"][0]["vendor"] = "oracle"


def _plaintext_password(raw):
    raw["sources"][0]["connection"]["password"] = SECRET


def _unknown_recipient(raw):
    raw["destinations"][0]["recipient"] = "globex"


def _unknown_enabled_model(raw):
    raw["destinations"][0]["enabled_models"] = ["orders", "invoices"]


def _duplicate_source(raw):
    raw["sources"].append({"name": "lake", "vendor": "parquet", "connection": {"path": "other"}})


def _duplicate_model(raw):
    raw["models"].append(dict(raw["models"][0]))


def _duplicate_recipient(raw):
    raw["recipients"].append({"name": "acme", "id_in_provider_system": "org_2"})


def _too_many_partitions(raw):
    raw["models"][0]["max_transfer_time_window_seconds"] = 60
    raw["models"][0]["min_start_time_epoch"] = 0


def _both_table_and_query(raw):
    raw["models"][0]["source_query"] = "SELECT 1"


def _unknown_data_type(raw):
    raw["models"][0]["columns"][1]["data_type"] = "varchar2"


def _bad_name(raw):
    raw["recipients"][0]["name"] = "acme corp"


def _nul_in_tenant_id(raw):
    raw["recipients"][0]["id_in_provider_system"] = "org\x001"


REFUSALS = [
    ("unknown-source", _unknown_source, "models[0] (orders).source_name", "unknown source 'no_such_db'"),
    ("no-last-modified", _no_last_modified, "models[0] (orders).columns", "found none"),
    ("two-last-modified", _two_last_modified, "models[0] (orders).columns", "found updated_at, created_at"),
    ("last-modified-float", _last_modified(data_type="float"),
     "models[0] (orders).columns (updated_at)", "cannot be 'float'"),
    ("last-modified-integer-without-unit", _last_modified(data_type="integer"),
     "models[0] (orders).columns (updated_at)", "unit of its epoch values"),
    ("last-modified-epoch-on-a-timestamp", _last_modified(last_modified_format="epoch_ms"),
     "models[0] (orders).columns (updated_at)", "holds integer values but the column has data_type timestamp"),
    ("last-modified-date-declared-timestamp", _last_modified(data_type="date", last_modified_format="timestamp"),
     "models[0] (orders).columns (updated_at)", "holds timestamp values but the column has data_type date"),
    ("last-modified-format-that-does-not-sort", _last_modified(data_type="string", datetime_format="%d/%m/%Y %H:%M"),
     "models[0] (orders).columns (updated_at)", "do not run from the year down"),
    ("last-modified-format-with-weekday", _last_modified(data_type="string", datetime_format="%a %Y-%m-%d"),
     "models[0] (orders).columns (updated_at)", "it uses %a"),
    ("last-modified-format-on-a-timestamp", _last_modified(datetime_format="%Y-%m-%d"),
     "models[0] (orders).columns (updated_at)", "datetime_format is set but the column is read as timestamp"),
    ("text-last-modified-split-in-queries", _text_last_modified_split_in_queries,
     "models[0] (orders).columns (updated_at)", "cannot split on a text column"),
    ("two-destinations-one-delta-path", _same_delta_path, "destinations",
     "destinations acme_lake, globex_dst write to the same place"),
    ("two-destinations-one-postgres-schema", _same_postgres_schema, "destinations",
     "schema shared): their rows and watermarks would mix"),
    ("last-modified-format-on-another-column", _format_on_another_column,
     "models[0] (orders).columns (organization_id)", "this column is not it"),
    ("last-modified-unknown-kind", _last_modified(last_modified_format="epoch_ns"),
     "models[0].columns[2].last_modified_format", "epoch_us"),
    ("no-primary-key", _no_primary_key, "models[0] (orders).columns", "no primary key"),
    ("no-organization-column", _no_organization_column, "models[0] (orders).organization_column",
     "multi-tenant"),
    ("window-zero", _set("models", 0, "max_transfer_time_window_seconds", value=0),
     "models[0].max_transfer_time_window_seconds", "at least 1 second"),
    ("window-negative", _set("models", 0, "max_transfer_time_window_seconds", value=-60),
     "models[0].max_transfer_time_window_seconds", "at least 1 second"),
    ("window-months", _set("models", 0, "max_transfer_time_window_seconds", value="P1M"),
     "models[0].max_transfer_time_window_seconds", "years and months are not allowed"),
    ("typo", _typo, "models[0].max_transfer_time_windows_seconds", "unknown field"),
    ("unknown-vendor", _unknown_vendor, "sources[0]", "'oracle'"),
    ("plaintext-password", _plaintext_password, "sources[0].connection.password",
     "secrets cannot be written in the configuration file"),
    ("negative-lookback", _set("sources", 0, "lookback_window", value=-1), "sources[0].lookback_window",
     "greater than or equal to 0"),
    ("unknown-recipient", _unknown_recipient, "destinations[0] (acme_lake).recipient",
     "unknown recipient 'globex'"),
    ("unknown-enabled-model", _unknown_enabled_model, "destinations[0] (acme_lake).enabled_models",
     "unknown model 'invoices'"),
    ("duplicate-source", _duplicate_source, "sources", "'lake' is used more than once"),
    ("duplicate-model", _duplicate_model, "models", "'orders' is used more than once"),
    ("duplicate-recipient", _duplicate_recipient, "recipients", "'acme' is used more than once"),
    ("too-many-partitions", _too_many_partitions, "models[0] (orders).max_transfer_time_window_seconds",
     "partitions"),
    ("table-and-query", _both_table_and_query, "models[0] (orders)", "exactly one of source_table"),
    ("unknown-data-type", _unknown_data_type, "models[0].columns[1].data_type", "unknown data_type"),
    ("bad-name", _bad_name, "recipients[0].name", "pattern"),
    ("nul-in-tenant-id", _nul_in_tenant_id, "recipients[0] (acme).id_in_provider_system", "NUL"),
]


@pytest.mark.parametrize(
    ("mutate", "path", "message"),
    [(m, p, msg) for _, m, p, msg in REFUSALS],
    ids=[case_id for case_id, *_ in REFUSALS],
)
def test_refused(mutate, path, message):
    raw = valid_raw()
    mutate(raw)
    problems = problems_of(raw)
    matching = [m for p, m in problems if p == path]
    assert matching, f"no problem at {path!r}; got {problems}"
    assert any(message in m for m in matching), problems


def test_plaintext_password_never_appears_in_the_error():
    raw = valid_raw()
    _plaintext_password(raw)
    with pytest.raises(ConfigError) as info:
        parse_config(raw, now=NOW)
    assert SECRET not in str(info.value)
    assert all(SECRET not in p.message and SECRET not in p.fix for p in info.value.problems)


def test_too_many_partitions_counts_from_the_recipients_start_too():
    raw = valid_raw()
    raw["models"][0]["max_transfer_time_window_seconds"] = 60
    raw["models"][0]["min_start_time_epoch"] = int(NOW.timestamp()) - 3_600  # an hour: fine alone
    parse_config(raw, now=NOW)
    raw["recipients"][0]["default_full_refresh_min_start_time_epoch"] = 0
    assert any(p == "models[0] (orders).max_transfer_time_window_seconds" for p, _ in problems_of(raw))


def test_every_problem_is_reported_at_once():
    raw = valid_raw()
    _unknown_source(raw)
    _unknown_recipient(raw)
    paths = [p for p, _ in problems_of(raw)]
    assert "models[0] (orders).source_name" in paths
    assert "destinations[0] (acme_lake).recipient" in paths


def test_an_unknown_recipient_among_thousands_names_a_few_of_them_not_all(tmp_path):
    """The fix names the configured recipients, as many as a reader can use: a file of 5,000 does
    not get a message of 5,000 names."""
    raw = valid_raw()
    template = raw["recipients"][0]
    raw["recipients"] = [{**template, "name": f"customer_{i}", "id_in_provider_system": f"t-{i}"}
                         for i in range(5000)]
    raw["destinations"] = raw["destinations"][:1]
    raw["destinations"][0]["recipient"] = "nobody"
    with pytest.raises(ConfigError) as info:
        parse_config(raw, now=NOW)
    (problem,) = [p for p in info.value.problems if p.path.endswith(".recipient")]
    assert "unknown recipient 'nobody'" in problem.message
    assert "'customer_0', 'customer_1'" in problem.fix
    assert "(4980 more)" in problem.fix
    assert "customer_4999" not in problem.fix
    assert len(problem.fix) < 1000


# -- durations in the file -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("P1D", 86_400), ("PT1H", 3_600), ("3600", 3_600), (None, None)],
    ids=["P1D", "PT1H", "numeric-string", "unset"],
)
def test_window_durations(value, seconds):
    raw = valid_raw()
    raw["models"][0]["max_transfer_time_window_seconds"] = value
    assert parse_config(raw, now=NOW).model("orders").max_transfer_time_window_seconds == seconds


def test_lookback_defaults_by_vendor():
    config = parse_config(valid_raw(), now=NOW)
    assert config.source("app_db").lookback_seconds == 30
    assert config.source("lake").lookback_seconds == 300


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("PT1M", 60), (0, 0), ("PT2H", 7_200), (45, 45)],
    ids=["PT1M", "zero", "PT2H", "int"],
)
def test_lookback_override(value, seconds):
    raw = valid_raw()
    raw["sources"][0]["lookback_window"] = value
    raw["sources"][1]["lookback_window"] = value
    config = parse_config(raw, now=NOW)
    assert config.source("app_db").lookback_seconds == seconds
    assert config.source("lake").lookback_seconds == seconds


def test_a_database_source_reads_with_a_read_timeout_a_lake_has_none():
    raw = valid_raw()
    assert parse_config(raw, now=NOW).source("app_db").read_timeout_seconds == 600  # 10 minutes
    raw["sources"][0]["read_timeout_seconds"] = 30
    assert parse_config(raw, now=NOW).source("app_db").read_timeout_seconds == 30
    for value in (0, -1, 86_401):
        raw["sources"][0]["read_timeout_seconds"] = value
        with pytest.raises(ConfigError, match=r"sources\[0\]\.read_timeout_seconds"):
            parse_config(raw, now=NOW)
    raw = valid_raw()
    raw["sources"][1]["read_timeout_seconds"] = 30  # a lake's reads are the object store client's
    with pytest.raises(ConfigError, match=r"sources\[1\]\.read_timeout_seconds"):
        parse_config(raw, now=NOW)


# -- finding and loading the file ----------------------------------------------------------------


def test_find_config_path_explicit_wins(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "from_env.yaml"))
    monkeypatch.chdir(tmp_path)
    assert find_config_path(tmp_path / "explicit.yaml") == tmp_path / "explicit.yaml"
    assert find_config_path("explicit.yaml") == Path("explicit.yaml")


def test_find_config_path_env_before_working_directory(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "from_env.yaml"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "transfer_platform.yaml").write_text("{}")
    assert find_config_path() == tmp_path / "from_env.yaml"
    assert find_config_path(None) == tmp_path / "from_env.yaml"


def test_find_config_path_falls_back_to_working_directory(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    assert find_config_path() == tmp_path / "transfer_platform.yaml"
    monkeypatch.setenv(ENV_VAR, "")  # empty counts as unset
    assert find_config_path() == tmp_path / "transfer_platform.yaml"


def test_load_config_resolves_relative_paths_against_the_file(monkeypatch, tmp_path):
    folder = tmp_path / "conf"
    folder.mkdir()
    raw = valid_raw()
    absolute = tmp_path / "elsewhere"
    raw["destinations"][0]["connection"]["path"] = str(absolute)
    config_file = folder / "platform.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(tmp_path)  # a different working directory must not matter
    config = load_config(config_file, now=NOW)
    assert config.source("lake").connection.path == (folder / "lake").resolve()
    assert config.destination("acme_lake").connection.path == absolute


def test_load_config_relative_destination_path(tmp_path):
    raw = valid_raw()
    raw["sources"][1]["connection"]["path"] = "../data/lake"
    (tmp_path / "conf").mkdir()
    config_file = tmp_path / "conf" / "platform.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    config = load_config(str(config_file), now=NOW)
    assert config.destination("acme_lake").connection.path == (tmp_path / "conf" / "out").resolve()
    assert config.source("lake").connection.path == (tmp_path / "data" / "lake").resolve()


def test_load_config_relative_config_path(monkeypatch, tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "platform.yaml").write_text(yaml.safe_dump(valid_raw()))
    monkeypatch.chdir(tmp_path)
    config = load_config("conf/platform.yaml", now=NOW)
    assert config.source("lake").connection.path == (tmp_path / "conf" / "lake").resolve()
    assert config.source("lake").connection.path.is_absolute()


def test_load_config_uses_the_environment_variable(monkeypatch, tmp_path):
    config_file = tmp_path / "via_env.yaml"
    config_file.write_text(yaml.safe_dump(valid_raw()))
    monkeypatch.setenv(ENV_VAR, str(config_file))
    monkeypatch.chdir(tmp_path)
    assert load_config(now=NOW).source("lake").connection.path == (tmp_path / "lake").resolve()


def test_load_config_missing_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(missing, now=NOW)
    assert info.value.problems[0].path == str(missing)
    assert "not found" in info.value.problems[0].message


def test_load_config_invalid_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad, now=NOW)
    assert "not valid YAML" in info.value.problems[0].message
    assert info.value.source == str(bad)


def test_a_json_file_is_the_same_configuration_as_its_yaml(tmp_path, monkeypatch):
    """JSON is YAML: a generated file may be JSON, and means what the same document in YAML means;
    it is read by the json module (much faster), not by the YAML loader."""
    raw = valid_raw()
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "c.json").write_text(json.dumps(raw, indent=2))
    from_yaml = load_config(tmp_path / "c.yaml", now=NOW)
    with monkeypatch.context() as patched:
        patched.setattr(yaml, "load", lambda *_a, **_k: pytest.fail("the JSON file went through the YAML loader"))
        assert load_config(tmp_path / "c.json", now=NOW) == from_yaml
    # YAML's flow style also starts with "{": not JSON (unquoted keys), read as YAML all the same
    (tmp_path / "flow.yaml").write_text(yaml.safe_dump(raw, default_flow_style=True))
    assert (tmp_path / "flow.yaml").read_text().startswith("{")
    assert load_config(tmp_path / "flow.yaml", now=NOW) == load_config(tmp_path / "c.yaml", now=NOW)
    # a broken JSON file is named by YAML's error, with its line
    (tmp_path / "bad.json").write_text(json.dumps(raw, indent=2)[:-40])
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "bad.json", now=NOW)
    assert "not valid YAML" in info.value.problems[0].message
    assert "line" in info.value.problems[0].message
    # the JSON document is checked as the YAML one is: a problem is named by its field
    raw["destinations"][0]["recipient"] = "nobody"
    (tmp_path / "c.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "c.json", now=NOW)
    assert any("unknown recipient 'nobody'" in p.message for p in info.value.problems)


def test_load_config_errors_name_the_file(tmp_path):
    raw = valid_raw()
    _unknown_recipient(raw)
    config_file = tmp_path / "platform.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as info:
        load_config(config_file, now=NOW)
    assert info.value.source == str(config_file)
    assert str(config_file) in str(info.value)


# -- secrets -----------------------------------------------------------------------------------


def test_env_ref_resolves_from_the_environment_without_showing_it(monkeypatch):
    monkeypatch.setenv("PG_PASSWORD", SECRET)
    config = parse_config(valid_raw(), now=NOW)
    ref = config.source("app_db").connection.password
    secret = ref.resolve("sources[0].connection.password")
    assert secret.get_secret_value() == SECRET
    for text in (str(ref), repr(ref), str(secret), repr(secret), str(config), repr(config),
                 config.model_dump_json()):
        assert SECRET not in text
    assert str(ref) == "${PG_PASSWORD}"


def test_env_ref_unset_variable_is_a_config_error(monkeypatch):
    monkeypatch.delenv("PG_PASSWORD", raising=False)
    ref = EnvRef.model_validate("${PG_PASSWORD}")
    with pytest.raises(ConfigError) as info:
        ref.resolve("sources[0].connection.password")
    assert info.value.problems[0].path == "sources[0].connection.password"
    assert "PG_PASSWORD is not set" in info.value.problems[0].message


@pytest.mark.parametrize(
    "text",
    ["hunter2", "$PG_PASSWORD", "${PG PASSWORD}", "${1ABC}", "prefix${PG_PASSWORD}"],
    ids=["plain", "no-braces", "space", "leading-digit", "prefix"],
)
def test_env_ref_refuses_anything_but_a_reference(text):
    with pytest.raises(ValueError, match="secrets cannot be written"):
        EnvRef.model_validate(text)


# -- MySQL sources and schema-tenanted sources ---------------------------------------------------


def schema_tenanted_raw(vendor: str = "postgres", *, tenant: str = "org_1", query: bool = False) -> dict[str, Any]:
    """valid_raw() with its model on a schema-tenanted source of ``vendor`` and no organization column."""
    raw = valid_raw()
    connection = ({"path": "lake"} if vendor == "parquet" else
                  {"host": "localhost", "port": 3306, "database": "app", "username": "reader"})
    raw["sources"].append({"name": "tenanted", "vendor": vendor, "tenancy": "schema_tenanted",
                           "connection": connection})
    model = raw["models"][0]
    model["source_name"] = "tenanted"
    del model["organization_column"]
    model["columns"] = [c for c in model["columns"] if c["name_in_source"] != "organization_id"]
    if query:
        del model["source_table"]
        model["source_query"] = "SELECT id, updated_at FROM orders"
    else:
        model["source_table"] = "orders"
    raw["recipients"][0]["id_in_provider_system"] = tenant
    return raw


def test_mysql_source_parses_with_its_lookback():
    raw = valid_raw()
    raw["sources"].append({"name": "shop", "vendor": "mysql", "connection": {
        "host": "db", "port": 3306, "database": "shop", "username": "reader", "password": "${SHOP_PW}"}})
    config = parse_config(raw, now=NOW)
    source = config.source("shop")
    assert type(source) is MysqlSource
    assert source.lookback_seconds == 5
    assert source.tenancy == "multi_tenant"


@pytest.mark.parametrize("vendor", ["postgres", "mysql", "parquet"])
@pytest.mark.parametrize("query", [False, True], ids=["source_table", "source_query"])
def test_schema_tenanted_models_need_no_organization_column(vendor, query):
    config = parse_config(schema_tenanted_raw(vendor, tenant="org-o'reilly\\x", query=query), now=NOW)
    assert config.source("tenanted").tenancy == "schema_tenanted"
    assert config.model("orders").organization_column is None


def test_schema_tenanted_source_table_is_a_bare_table_name():
    raw = schema_tenanted_raw()
    raw["models"][0]["source_table"] = "public.orders"
    problems = problems_of(raw)
    assert ("models[0] (orders).source_table",) in [(p,) for p, _ in problems]
    assert any("inside each recipient's schema" in m for _, m in problems)


TENANT_PATH = "recipients[0] (acme).id_in_provider_system"


@pytest.mark.parametrize(
    ("vendor", "tenant", "query", "message"),
    [
        ("postgres", "t" * 64, False, "at most 63 bytes"),
        ("postgres", "é" * 32, False, "at most 63 bytes"),
        ("mysql", "t" * 65, False, "at most 64 characters"),
        ("mysql", "acme ", False, "cannot end with a space"),
        ("mysql", "acme?x", True, "'/' and '?' are syntax"),
        ("mysql", "acme/x", True, "'/' and '?' are syntax"),
        ("parquet", "..", False, "single folder name"),
        ("parquet", "a/b", True, "single folder name"),
    ],
    ids=["pg-64-bytes", "pg-multibyte", "mysql-65-chars", "mysql-trailing-space", "mysql-url-question",
         "mysql-url-slash", "parquet-dotdot", "parquet-slash"],
)
def test_a_tenant_id_that_cannot_name_its_schema_is_refused(vendor, tenant, query, message):
    problems = problems_of(schema_tenanted_raw(vendor, tenant=tenant, query=query))
    matching = [m for p, m in problems if p == TENANT_PATH]
    assert matching, problems
    assert message in matching[0]
    assert "schema-tenanted source 'tenanted'" in matching[0]


@pytest.mark.parametrize(("vendor", "tenant"), [("postgres", "t" * 63), ("mysql", "acme?x"),
                                                ("parquet", "o'reilly \\ x")],
                         ids=["pg-63-bytes", "mysql-question-in-table-read", "parquet-quotes"])
def test_tenant_ids_that_can_name_their_schema_pass(vendor, tenant):
    parse_config(schema_tenanted_raw(vendor, tenant=tenant), now=NOW)


def test_multi_tenant_sources_put_no_limit_on_tenant_ids():
    raw = valid_raw()
    raw["recipients"][0]["id_in_provider_system"] = "acme?/x" + "t" * 80
    parse_config(raw, now=NOW)


# -- settings without effect are refused; the others take effect ---------------------------------


def _mysql_source(raw, **connection):
    raw["sources"].append({"name": "shop", "vendor": "mysql", "connection": {
        "host": "db", "port": 3306, "database": "shop", "username": "reader", **connection}})


NO_EFFECT = [  # (id, base configuration, change, path, message)
    ("parquet-source-queries", valid_raw, _set("sources", 1, "max_concurrent_queries_per_transfer", value=4),
     "sources[1] (lake).max_concurrent_queries_per_transfer",
     "no effect on a parquet source: Spark reads the lake's files in parallel by itself"),
    ("delta-destination-queries", valid_raw,
     _set("destinations", 0, "max_concurrent_queries_per_transfer", value=2),
     "destinations[0] (acme_lake).max_concurrent_queries_per_transfer",
     "no effect on a delta destination: delta-rs writes each window as one MERGE commit"),
    ("mysql-schema", valid_raw, lambda raw: _mysql_source(raw, schema="shop"),
     "sources[2] (shop).connection.schema", "MySQL's schemas are its databases"),
    ("schema-tenanted-schema", schema_tenanted_raw, _set("sources", 2, "connection", "schema", value="public"),
     "sources[2] (tenanted).connection.schema", "schema named by its id_in_provider_system"),
    ("schema-tenanted-organization-column", schema_tenanted_raw,
     _set("models", 0, "organization_column", value="organization_id"),
     "models[0] (orders).organization_column", "source 'tenanted' is schema-tenanted"),
]


@pytest.mark.parametrize(("base", "mutate", "path", "message"), [case[1:] for case in NO_EFFECT],
                         ids=[case[0] for case in NO_EFFECT])
def test_a_setting_without_effect_is_refused_with_the_reason(base, mutate, path, message):
    raw = base()
    parse_config(raw, now=NOW)  # valid before the change
    mutate(raw)
    with pytest.raises(ConfigError) as info:
        parse_config(raw, now=NOW)
    matching = [p for p in info.value.problems if p.path == path]
    assert matching, f"no problem at {path!r}; got {info.value.problems}"
    assert any(message in p.message and p.fix.startswith("remove") for p in matching), matching


@pytest.mark.parametrize(("vendor", "block"), [("parquet", "sources"), ("delta", "destinations")])
def test_a_schema_on_a_path_connection_is_an_unknown_field(vendor, block):
    raw = valid_raw()
    entry = next(e for e in raw[block] if e["vendor"] == vendor)
    entry["connection"]["schema"] = "public"
    problems = problems_of(raw)
    assert any(p.endswith("connection.schema") and m == "unknown field" for p, m in problems), problems


def test_the_defaults_and_settings_with_an_effect_pass():
    raw = valid_raw()
    raw["sources"][0]["connection"]["schema"] = "app"  # multi-tenant PostgreSQL: its currentSchema
    raw["sources"][0]["max_concurrent_queries_per_transfer"] = 4  # parallel JDBC reads
    raw["sources"][1]["max_concurrent_queries_per_transfer"] = 1  # the default, written out
    raw["destinations"][0]["max_concurrent_queries_per_transfer"] = 1
    raw["models"][0]["is_append_only"] = True
    raw["models"][0]["description"] = "orders of the shop"
    _mysql_source(raw)
    raw["destinations"].append({"name": "acme_pg", "vendor": "postgres", "recipient": "acme",
                                "max_concurrent_queries_per_transfer": 3, "connection": {
                                    "host": "db", "port": 5432, "database": "dw", "username": "loader",
                                    "schema": "provider_data"}})
    raw["recipients"].append({"name": "globex", "id_in_provider_system": "org_2"})
    raw["destinations"][1]["recipient"] = "globex"
    config = parse_config(raw, now=NOW)
    assert config.source("app_db").connection.schema_ == "app"
    assert config.model("orders").is_append_only is True
    assert config.destination("acme_pg").connection.schema_ == "provider_data"


def test_the_documented_configuration_example_is_valid():
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    example = page.split("## A complete example", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    config = parse_config(yaml.safe_load(example), now=NOW)
    events = config.model("events")
    assert events.is_append_only is False
    assert config.source("app_db").connection.schema_ == "public"


def test_destinations_in_different_schemas_or_paths_are_accepted():
    raw = valid_raw()
    _second_recipient(raw, {"vendor": "delta", "connection": {"path": "out2"}})
    parse_config(raw, now=NOW)
    raw = valid_raw()
    _same_postgres_schema(raw)
    raw["destinations"][1]["connection"]["schema"] = "other"
    parse_config(raw, now=NOW)


def test_the_documented_object_storage_example_is_valid(monkeypatch):
    """The block of docs/object-storage.md, added to the configuration example: it validates, the
    signing key's variable checked as validate checks it."""
    from transfer_platform.destinations.manifests import new_signing_key

    docs = Path(__file__).resolve().parents[2] / "docs"
    page = (docs / "configuration.md").read_text()
    main = yaml.safe_load(page.split("## A complete example", 1)[1].split("```yaml", 1)[1].split("```", 1)[0])
    section = (docs / "object-storage.md").read_text().split("```yaml", 1)[1].split("```", 1)[0]
    main["destinations"] += yaml.safe_load(section)["destinations"]
    monkeypatch.setenv("ACME_MANIFEST_KEY", new_signing_key()[0])
    config = parse_config(main, now=NOW)
    bucket = config.destination("acme_bucket")
    assert (bucket.vendor, bucket.connection.bucket, bucket.connection.path_style) == ("s3", "acme-exports", True)
    monkeypatch.delenv("ACME_MANIFEST_KEY")
    # unset, it stops only what needs it (a transfer to acme_bucket, before Spark starts), as a
    # password's variable does: the other destinations' transfers and Dagster's definitions load
    config = parse_config(main, now=NOW)
    needed = secrets_needed(config, "acme_bucket", config.models_for(config.destination("acme_bucket")))
    (problem,) = [p for p in needed if "signing_key" in p.path]
    assert problem.path.endswith("(acme_bucket).signing_key")
    assert "ACME_MANIFEST_KEY is not set" in problem.message
    monkeypatch.setenv("ACME_MANIFEST_KEY", "not a key")
    with pytest.raises(ConfigError, match="ACME_MANIFEST_KEY does not hold a signing key"):
        parse_config(main, now=NOW)
