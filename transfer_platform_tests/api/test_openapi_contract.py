"""The API keeps the contract its OpenAPI document states: Schemathesis generates requests from
``/openapi.json`` for every operation (bodies, parameters, a valid API key) and checks that no
answer is a 5xx, and that every answer's status code, content type and body are ones the document
declares; and that a request holding text no PostgreSQL text can (a NUL, a lone surrogate) in any
of its strings, a path's or a query's parameter or a body's key or value, is refused with 422 naming
where. (Not checked: that every request the document allows is accepted. A body's entry is
checked by the configuration's models and cross-checks, e.g. that the recipient it names exists,
which no JSON schema states, so a well-formed entry may be refused with 422.) The application is the real one over the small platform (its store in PostgreSQL, a
Dagster instance of its own); a bounded number of examples per operation."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode, checks

from transfer_platform_tests.support.api import Api, platform_config, start_api
from transfer_platform_tests.support.platform import dagster_home
from transfer_platform_tests.support.recorded_transfers import T0, record

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

#: examples per operation: well-formed requests, and requests the document says are wrong
EXAMPLES = 15
NEGATIVE = 10
#: examples per operation with a string made unstorable: a NUL, or a lone surrogate (a JSON body's
#: "\ud800"; a URL has no form of one: its bytes, not UTF-8, are test_unstorable_text.py's)
UNSTORABLE = 5
IN_JSON, IN_URL = ("\x00", "\ud800"), ("\x00",)


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
        document = yaml.safe_load(path.read_text())  # the fuzzer's wrong keys are many: not slowed here
        document["api"] = {**(document.get("api") or {}), "failed_credentials_per_minute": 1_000_000}
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        patch.setenv("TRANSFER_PLATFORM_CONFIG", str(path))
        patch.setenv("DAGSTER_HOME", str(dagster_home(Path(root))))
        api = start_api(path, schema)
        with api.client:
            instance = dg.DagsterInstance.get()  # transfers to list and read back, failed and not
            record(instance, "SUCCESS", created=T0, ended=T0, metrics=True)
            record(instance, "PARTIAL_FAILURE", created=T0, ended=T0, metrics=True, failure={
                "error": "permission denied", "error_type": "PERMISSION_DENIED", "blame": "destination"})
            instance.dispose()
            yield api
        instance = getattr(api.app.state, "dagster_instance", None)
        if instance is not None:
            instance.dispose()
        dispose_engines()
        with pg_connect(autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _fuzz(operation, mode: GenerationMode, examples: int, key: str) -> str | None:
    """``examples`` requests of ``mode`` to one operation, each answer checked; the first failure."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def run(case) -> None:
        case.call_and_validate(headers={"X-API-KEY": key}, excluded_checks=[checks.positive_data_acceptance])

    try:
        run()
    except Unsatisfiable:  # nothing of this mode exists (a route without parameters has no wrong request)
        return None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 (one operation's failure is reported with the others')
        return f"{operation.label} ({mode.value}): {exc}" + "".join(
            f"\n  {e}" for e in getattr(exc, "exceptions", ()))
    return None


#: a string of a request: the characters it can carry, and how to put one of them into it at a
#: position (which answers the path the API's problem names it by)
Slot = tuple[tuple[str, ...], Callable[[str, int], str]]


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" if c == "\x00" or "\ud800" <= c <= "\udfff" else c for c in text)


def _string_slots(case) -> list[Slot]:
    """Every string of ``case``: its path's and query's parameters, its body's keys and values."""
    slots: list[Slot] = []

    def value_of(container: dict | list, key: Any, where: str, alphabet: tuple[str, ...]) -> None:
        def put(bad: str, at: int) -> str:
            text = container[key]
            container[key] = text[:at] + bad + text[at:]
            return where
        slots.append((alphabet, put))

    def key_of(container: dict, key: str, parent: str) -> None:
        def put(bad: str, at: int) -> str:
            changed = key[:at] + bad + key[at:]
            container[changed] = container.pop(key)
            return f"{parent}.{_escaped(changed)}" if parent else _escaped(changed)
        slots.append((IN_JSON, put))

    for part, parameters in (("path", case.path_parameters), ("query", case.query)):
        for name, value in (parameters or {}).items():
            if isinstance(value, str):
                value_of(parameters, name, f"{part}.{name}", IN_URL)
    stack: list[tuple[str, Any]] = [("", case.body)] if isinstance(case.body, (dict, list)) else []
    while stack:
        path, value = stack.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in list(items):
            where = f"{path or 'body'}[{key}]" if isinstance(key, int) else f"{path}.{_escaped(key)}" if path else _escaped(key)
            if isinstance(key, str):
                key_of(value, key, path)
            if isinstance(item, str):
                value_of(value, key, where, IN_JSON)
            elif isinstance(item, (dict, list)):
                stack.append((where, item))
    return slots


def _fuzz_unstorable(operation, examples: int, key: str) -> str | None:
    """``examples`` well-formed requests to one operation, each with a NUL or a lone surrogate put
    into one of its strings: each must be refused with 422 naming that string."""

    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE), data=st.data())
    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def run(case, data) -> None:
        slots = _string_slots(case)
        if not slots:  # nothing to put a character into (a route without parameters or body)
            return
        alphabet, put = data.draw(st.sampled_from(slots))
        character = data.draw(st.sampled_from(alphabet))
        where = put(character, data.draw(st.integers(0, 40)))
        response = case.call_and_validate(headers={"X-API-KEY": key},
                                          excluded_checks=[checks.positive_data_acceptance])
        answer = json.loads(response.content)
        assert response.status_code == 422, (where, repr(character), answer)
        problems = {problem["path"]: problem for problem in answer["errors"]}
        assert where in problems, (where, answer)
        assert problems[where]["fix"], problems[where]

    try:
        run()
    except Unsatisfiable:
        return None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 (one operation's failure is reported with the others')
        return f"{operation.label} (unstorable text): {exc}" + "".join(
            f"\n  {e}" for e in getattr(exc, "exceptions", ()))
    return None


def test_every_answer_is_declared_and_none_is_a_server_error(contract_api: Api) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", contract_api.app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 30, [o.label for o in operations]  # every route is in the document
    failures = [failure for operation in operations
                for mode, examples in ((GenerationMode.POSITIVE, EXAMPLES), (GenerationMode.NEGATIVE, NEGATIVE))
                if (failure := _fuzz(operation, mode, examples, contract_api.key)) is not None]
    assert not failures, "\n\n".join(failures)


def test_text_no_database_can_hold_is_refused_wherever_it_is_sent(contract_api: Api) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", contract_api.app)
    operations = [result.ok() for result in schema.get_all_operations()]
    failures = [failure for operation in operations
                if (failure := _fuzz_unstorable(operation, UNSTORABLE, contract_api.key)) is not None]
    assert not failures, "\n\n".join(failures)


def test_the_document_declares_the_key_the_filters_and_the_bodies(contract_api: Api) -> None:
    document = contract_api.client.get("/openapi.json").json()
    assert document["components"]["securitySchemes"]["api_key"] == {
        "type": "apiKey", "in": "header", "name": "X-API-KEY",
        "description": "an API key: `transfer-platform api-key create NAME`"}
    listing = document["paths"]["/transfers"]["get"]
    assert {p["name"] for p in listing["parameters"]} >= {
        "destination_id", "status", "include_tags", "ended_before", "ended_after", "page_size", "cursor"}
    assert listing["security"] == [{"api_key": []}]
    for path, method in (("/destinations", "post"), ("/test-destination", "post"), ("/webhooks", "post"),
                         ("/magic-links", "post"), ("/destinations/{key}/transfer", "post")):
        operation = document["paths"][path][method]
        assert operation["requestBody"]["content"]["application/json"]["schema"] != {}, path
        assert {"401", "422"} <= set(operation["responses"]), path
