"""The configuration of Azure Blob Storage destinations: an ``abs`` destination and a Delta one in a
container parse to their classes; two destinations sharing a container's prefix (or one nested in
the other's) are refused; names Azure refuses and a key written in the file are refused."""

from __future__ import annotations

from typing import Any

import pytest

from transfer_platform.config.connection_settings import AzureBlobConnection
from transfer_platform.config.parsing import parse_config
from transfer_platform.vendors.delta import DeltaDestination
from transfer_platform.vendors.object_storage import AzureBlobDestination
from transfer_platform_tests.support.config import NOW, problems_of, valid_raw


def azure(**changes: Any) -> dict:
    return {"account_name": "acmeexports", "container": "transfers", "account_key": "${AZ_KEY}", **changes}


def with_destinations(*destinations: dict) -> dict:
    raw = valid_raw()
    raw["destinations"] = [{"recipient": "acme", **d} for d in destinations]
    return raw


def test_object_storage_and_delta_in_a_container_parse_to_their_classes() -> None:
    config = parse_config(with_destinations(
        {"name": "files", "vendor": "abs", "signing_key": "${SIGNING}", "connection": azure(prefix="acme")},
        {"name": "tables", "vendor": "delta", "connection": azure(container="lake")},
        {"name": "on_s3", "vendor": "delta", "connection": {"bucket": "lake", "prefix": "acme"}},
    ), now=NOW)
    files, tables, on_s3 = config.destinations
    assert isinstance(files, AzureBlobDestination)
    assert isinstance(tables, DeltaDestination)
    assert isinstance(tables.connection, AzureBlobConnection)
    assert not isinstance(on_s3.connection, AzureBlobConnection)
    assert files.connection.service_url == "https://acmeexports.blob.core.windows.net"


@pytest.mark.parametrize(("second", "shared"), [
    ({"prefix": "acme"}, True),
    ({"prefix": "acme/more"}, True),  # nested in the first's prefix
    ({"prefix": "globex"}, False),
    ({"prefix": "acme", "container": "other"}, False),
])
def test_two_destinations_in_one_containers_prefix_are_refused(second: dict, shared: bool) -> None:
    raw = with_destinations(
        {"name": "first", "vendor": "abs", "signing_key": "${SIGNING}", "connection": azure(prefix="acme")},
        {"name": "second", "vendor": "delta", "connection": azure(**second)},
    )
    if not shared:
        parse_config(raw, now=NOW)
        return
    messages = [m for _, m in problems_of(raw)]
    assert any("destinations first, second write to the same place" in m for m in messages), messages


@pytest.mark.parametrize(("changes", "field"), [
    ({"container": "Has-Upper"}, "container"),
    ({"container": "two--dashes"}, "container"),
    ({"account_name": "no_underscores"}, "account_name"),
    ({"account_key": "a-key-written-in-the-file"}, "account_key"),
])
def test_what_azure_refuses_and_a_written_key_are_refused(changes: dict, field: str) -> None:
    raw = with_destinations({"name": "files", "vendor": "abs", "signing_key": "${SIGNING}",
                             "connection": azure(**changes)})
    problems = problems_of(raw)
    assert any(field in path for path, _ in problems), problems
    assert "a-key-written-in-the-file" not in str(problems)
