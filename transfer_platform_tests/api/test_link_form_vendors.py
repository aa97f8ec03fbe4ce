"""What the magic-link form offers a recipient: every database destination whose configuration a
recipient can fill in alone (a connection of text, numbers, secrets and switches), the warehouses
included; the connection's secrets as password fields, a switch as a checkbox; settings the form
cannot show left at their defaults. Object storage is not offered: its signing key is the
provider's, not the recipient's."""

from __future__ import annotations

from transfer_platform.api.links import form_vendors


def fields(vendor: str) -> dict[str, dict]:
    return {field["name"]: field for field in form_vendors()[vendor]}


def test_the_warehouses_are_offered_with_their_connections_fields() -> None:
    offered = form_vendors()
    assert {"postgres", "mysql", "duckdb", "snowflake", "bigquery", "clickhouse"} <= set(offered)
    snowflake = fields("snowflake")
    assert {"account", "user", "password", "database", "schema", "warehouse"} <= set(snowflake)
    assert snowflake["password"]["type"] == "password"
    assert snowflake["account"]["required"] is True
    assert "protocol" not in snowflake, "a choice the form cannot show stays at its default (https)"
    bigquery = fields("bigquery")
    assert {"project", "dataset", "credentials"} <= set(bigquery)
    assert bigquery["credentials"]["type"] == "password", "a service-account key is a secret"


def test_a_switch_is_a_checkbox() -> None:
    clickhouse = fields("clickhouse")
    assert clickhouse["secure"] == {"name": "secure", "type": "boolean", "required": False}
    assert clickhouse["password"]["type"] == "password"


def test_object_storage_is_not_offered() -> None:
    assert not {"local", "s3", "abs", "gcs", "sftp"} & set(form_vendors())
