"""A connection check's fix speaks of a password as it was given: one sent as a value to
``POST /test-destination`` (or saved so) is "the password you entered", one given as
``${VARIABLE}`` is "the password's environment variable". Against the machine's PostgreSQL with a
login it refuses (a user that does not exist: the test server trusts every password)."""

from __future__ import annotations

import uuid

import pytest

from transfer_platform_tests.support.api import Api
from transfer_platform_tests.support.postgres import pg_connection_config

LOGIN = "log in to database"
NOBODY = "nobody_" + uuid.uuid4().hex[:8]


def login_fix(answer) -> str:
    assert answer.status_code == 200, answer.text
    (check,) = [c for c in answer.json()["data"]["checks"] if c["check"].startswith(LOGIN)]
    assert check["outcome"] == "FAIL", check
    return check["fix"]


def wrong_login(password: str, name: str = "acme_pg") -> dict:
    return {"destination": {"name": name, "recipient": "acme", "vendor": "postgres",
                            "connection": {**pg_connection_config("tp_entered"), "username": NOBODY,
                                           "password": password}}}


@pytest.fixture
def with_recipient(api: Api) -> Api:
    assert api.post("/recipients", {"recipient": {"name": "acme", "id_in_provider_system": "acme"}}).status_code == 201
    return api


def test_a_typed_password_is_spoken_of_as_entered(with_recipient: Api) -> None:
    fix = login_fix(with_recipient.post("/test-destination", wrong_login("typed-" + uuid.uuid4().hex)))
    assert fix == "check username, database and the password you entered"
    # saved so, its test speaks the same words
    assert with_recipient.post("/destinations", wrong_login("typed")).status_code == 201
    assert login_fix(with_recipient.post("/destinations/acme_pg/test-connection")) == fix


def test_a_password_in_a_variable_is_spoken_of_as_its_variable(with_recipient: Api,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TP_ENTERED_PASSWORD", "x")
    fix = login_fix(with_recipient.post("/test-destination", wrong_login("${TP_ENTERED_PASSWORD}")))
    assert fix == "check username, database and the password's environment variable"
