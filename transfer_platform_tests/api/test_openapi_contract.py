"""The API keeps the contract its OpenAPI document states: Schemathesis generates requests from
``/openapi.json`` for every operation (bodies, parameters, a valid API key) and checks that no
answer is a 5xx, and that every answer's status code, content type and body are ones the document
declares. The application is the real one over the small platform (its store in PostgreSQL, a
Dagster instance of its own); a bounded number of examples per operation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from transfer_platform_tests.support.api import Api, platform_config, start_api
from transfer_platform_tests.support.platform import dagster_home

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

#: examples per operation (hypothesis' phases; Schemathesis' coverage phase adds its boundary cases)
EXAMPLES = 15


@pytest.fixture(scope="module")
def contract_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """The API over the small platform, kept for the module (every operation is fuzzed against it)."""
    from cryptography.fernet import Fernet

    from transfer_platform.config.secrets import SECRET_KEY_ENV
    from transfer_platform.store.database import dispose_engines
    from transfer_platform_tests.support.postgres import pg_connect

    root = tmp_path_factory.mktemp("contract")
    schema = f"tp_store_contract_{root.name[-6:].replace('-', '_')}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SECRET_KEY_ENV, Fernet.generate_key().decode())
        path = platform_config(Path(root), schema)
        patch.setenv("TRANSFER_PLATFORM_CONFIG", str(path))
        patch.setenv("DAGSTER_HOME", str(dagster_home(Path(root))))
        api = start_api(path, schema)
        with api.client:
            yield api
        instance = getattr(api.app.state, "dagster_instance", None)
        if instance is not None:
            instance.dispose()
        dispose_engines()
        with pg_connect(autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def api_schema(contract_api: Api):
    return schemathesis.openapi.from_asgi("/openapi.json", contract_api.app)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
def test_every_answer_is_declared_and_none_is_a_server_error(case, contract_api: Api) -> None:
    case.call_and_validate(headers={"X-API-KEY": contract_api.key})
