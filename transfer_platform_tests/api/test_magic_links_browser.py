"""The magic link's form in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by Selenium) against the API served by a real uvicorn server: the recipient opens the link,
picks a vendor, fills in the connection, tests it, sees each check, and saves; a failed test, an
expired link and a second use of the same link."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from transfer_platform_tests.support.api import write_api_config
from transfer_platform_tests.support.browser import (
    chromium,
    fill,
    fill_and_test,
    free_socket,
    serving,
    text_of,
    wait,
)
from transfer_platform_tests.support.postgres import PG, pg_connect

pytestmark = pytest.mark.integration

PASSWORD = "browser-pw-" + uuid.uuid4().hex  # trust auth: accepted and ignored by the test server


@dataclass
class Served:
    url: str  # the server's base URL
    key: str
    engine: Any  # the store's engine

    def call(self, method: str, path: str, body: Any = None) -> httpx.Response:
        return httpx.request(method, self.url + path, json=body, timeout=60,
                             headers={"X-API-KEY": self.key})

    def rows(self, query: str) -> list:
        with self.engine.connect() as conn:
            return list(conn.execute(sa.text(query)))

    def link(self, recipient: str = "acme", **options: Any) -> str:
        answer = self.call("POST", "/magic-links", {"magic_link": {"recipient_id": recipient, **options}})
        assert answer.status_code == 201, answer.text
        return answer.json()["data"]["magic_link"]["url"]


@pytest.fixture
def served(tmp_path: Path, store_schema: str, secret_key: str) -> Iterator[Served]:
    """``transfer-platform api``'s application in a real uvicorn server on a free port, with a
    recipient ``acme``."""
    from transfer_platform.api.app import create_app
    from transfer_platform.store.api_keys import create_key
    from transfer_platform.store.database import migrate

    sock, base = free_socket()
    app = create_app(write_api_config(tmp_path, store_schema, api={"public_url": base}))
    migrate(app.state.store.settings.connection)
    _, key = create_key(app.state.store.engine, "browser-tests")
    with serving(app, sock):
        served = Served(base, key, app.state.store.engine)
        answer = served.call("POST", "/recipients", {"recipient": {"name": "acme", "id_in_provider_system": "acme-1"}})
        assert answer.status_code == 201, answer.text
        yield served


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as session:
        yield session


@pytest.fixture
def weak_user() -> Iterator[str]:
    """A role that can log in (trust auth) and has no right to create a schema."""
    name = f"ml_weak_{uuid.uuid4().hex[:8]}"
    with pg_connect(autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{name}" LOGIN')
        conn.execute(f'REVOKE CREATE ON DATABASE "{PG["dbname"]}" FROM "{name}"')
    yield name
    with pg_connect(autocommit=True) as conn:
        conn.execute(f'DROP ROLE IF EXISTS "{name}"')


def connection(schema: str, **changes: Any) -> dict[str, Any]:
    return {"host": PG["host"], "port": PG["port"], "database": PG["dbname"], "username": PG["user"],
            "password": PASSWORD, "schema": schema, **changes}


def test_a_recipient_connects_its_postgres_schema(served: Served, browser: webdriver.Chrome, dst_schema: str):
    url = served.link(redirect_url=served.url + "/openapi.json?onboarded=acme")
    browser.get(url)
    assert "acme" in text_of(browser, "recipient")
    options = [o.get_attribute("value") for o in Select(browser.find_element(By.ID, "vendor")).options]
    assert {"postgres", "mysql"} <= set(options)
    Select(browser.find_element(By.ID, "vendor")).select_by_value("postgres")
    assert not browser.find_element(By.ID, "save").is_enabled(), "Save waits for a passing test"
    # a bad port first: the error shows next to the field, nothing is tested
    fill(browser, connection(dst_schema, port="not-a-port"))
    browser.find_element(By.ID, "test").click()
    wait(browser, lambda b: text_of(b, "error-port") != "", "the port's error should show next to it")
    assert "integer" in text_of(browser, "error-port")
    assert browser.find_elements(By.CSS_SELECTOR, "#checks li") == []
    # the right port: every check passes, each listed
    fill(browser, {"port": PG["port"]})
    browser.find_element(By.ID, "test").click()
    wait(browser, lambda b: "Every check passed" in text_of(b, "status"), "the test should pass")
    assert text_of(browser, "error-port") == ""
    checks = browser.find_elements(By.CSS_SELECTOR, "#checks li.check")
    assert checks, "each check is listed"
    assert all("pass" in c.get_attribute("class").split() for c in checks), [c.text for c in checks]
    assert PASSWORD not in browser.page_source
    browser.find_element(By.ID, "save").click()
    wait(browser, lambda b: b.current_url == served.url + "/openapi.json?onboarded=acme",
         "the save should send the recipient to the link's redirect_url")
    browser.get(url + "/done")
    assert "connected" in text_of(browser, "title")
    # the provider has the destination, for acme, its password stored encrypted and masked in answers
    (row,) = served.rows("SELECT name, document FROM resources WHERE kind = 'destination'")
    assert row.name in text_of(browser, "message")
    assert row.document["recipient"] == "acme"
    assert row.document["connection"]["schema"] == dst_schema
    assert set(row.document["connection"]["password"]) == {"encrypted"}
    assert PASSWORD not in str(row.document)
    listed = served.call("GET", "/destinations").json()["data"]["destinations"]
    assert [(d["name"], d["connection"]["password"]) for d in listed] == [(row.name, "***")]
    assert PASSWORD not in served.call("GET", "/audit-log").text + str(served.rows("SELECT * FROM events"))
    (used,) = served.rows("SELECT used_at, destination_name FROM magic_links")
    assert used.used_at is not None
    assert used.destination_name == row.name


def test_a_failed_check_shows_its_fix_and_saves_nothing(served: Served, browser: webdriver.Chrome,
                                                        dst_schema: str, weak_user: str):
    browser.get(served.link())
    Select(browser.find_element(By.ID, "vendor")).select_by_value("postgres")
    fill(browser, connection(dst_schema, username=weak_user))
    browser.find_element(By.ID, "test").click()
    wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#checks li.fail"), "a failed check should show")
    failed = browser.find_element(By.CSS_SELECTOR, "#checks li.fail")
    assert "GRANT CREATE ON DATABASE" in failed.find_element(By.CLASS_NAME, "fix").text, failed.text
    assert "failed" in text_of(browser, "status")
    assert not browser.find_element(By.ID, "save").is_enabled()
    # a host that does not answer: the connection's check fails with its fix
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    fill(browser, {"username": PG["user"], "port": closed})
    browser.find_element(By.ID, "test").click()
    wait(browser, lambda b: str(closed) in b.find_element(By.ID, "checks").text, "the connection's failure should show")
    assert browser.find_element(By.CSS_SELECTOR, "#checks li.fail .fix").text.startswith("Fix:")
    assert not browser.find_element(By.ID, "save").is_enabled()
    assert served.call("GET", "/destinations").json()["data"]["destinations"] == []
    assert served.rows("SELECT used_at FROM magic_links")[0].used_at is None


def test_an_expired_link(served: Served, browser: webdriver.Chrome, dst_schema: str):
    url = served.link()
    with served.engine.begin() as conn:
        conn.execute(sa.text("UPDATE magic_links SET expires_at = now() - interval '1 second'"))
    browser.get(url)
    assert text_of(browser, "title") == "This link has expired"
    assert "new one" in text_of(browser, "message")
    assert browser.find_elements(By.ID, "form") == []
    # a link that expires while its page is open: Save is refused, the page says why
    browser.get(served.link())
    fill_and_test(browser, "postgres", connection(dst_schema))
    with served.engine.begin() as conn:
        conn.execute(sa.text("UPDATE magic_links SET expires_at = now() - interval '1 second'"))
    browser.find_element(By.ID, "save").click()
    wait(browser, lambda b: "expired" in text_of(b, "status"), "the page should say the link expired")
    assert not browser.find_element(By.ID, "test").is_enabled()
    assert served.call("GET", "/destinations").json()["data"]["destinations"] == []


def test_a_second_use_of_the_same_link(served: Served, browser: webdriver.Chrome, dst_schema: str):
    url = served.link(redirect_url="https://provider.example/onboarded")
    browser.get(url)
    fill_and_test(browser, "postgres", connection(dst_schema))
    # meanwhile the link is used from elsewhere (another tab, a forwarded copy)
    other = {"destination": {"vendor": "postgres", "name": "acme_elsewhere", "connection": connection(dst_schema)}}
    assert httpx.post(url + "/destination", json=other, timeout=60).status_code == 201
    browser.find_element(By.ID, "save").click()
    wait(browser, lambda b: "used" in text_of(b, "status"), "the page should say the link was used")
    assert not browser.find_element(By.ID, "save").is_enabled()
    assert [d["name"] for d in served.call("GET", "/destinations").json()["data"]["destinations"]] == ["acme_elsewhere"]
    browser.get(url)
    assert text_of(browser, "title") == "This link has been used"
    assert "new one" in text_of(browser, "message")
