"""The pages in a real browser: the API's application served by a real uvicorn server on a free
port, and Debian's headless Chromium driven by Selenium (``chromium`` and ``chromium-driver``,
installed by ``bash scripts/dev setup``)."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

WAIT = 60  # seconds a page has to show what a test waits for


def free_socket() -> tuple[socket.socket, str]:
    """A socket bound to a free port of 127.0.0.1, and its base URL (``http://127.0.0.1:<port>``)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


@contextmanager
def serving(app: Any, sock: socket.socket) -> Iterator[None]:
    """``app`` in a uvicorn server on ``sock`` (a thread of this process), until the block ends."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "the API server stopped"
        assert time.monotonic() < deadline, "the API server did not start"
        time.sleep(0.05)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    """A headless Chromium session."""
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver):
        pytest.fail("Chromium is not installed: run `bash scripts/dev setup` (installs Debian's chromium and "
                    "chromium-driver)", pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1200,1600", "--no-first-run", "--disable-extensions"):
        options.add_argument(argument)
    session = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    try:
        yield session
    finally:
        session.quit()


def wait(browser: webdriver.Chrome, condition, what: str):
    """Poll the page until ``condition`` holds (at most WAIT seconds)."""
    return WebDriverWait(browser, WAIT, poll_frequency=0.1, ignored_exceptions=(WebDriverException,)).until(
        condition, message=what)


def text_of(browser: webdriver.Chrome, element_id: str) -> str:
    return browser.find_element(By.ID, element_id).text


def fill(browser: webdriver.Chrome, values: dict[str, Any]) -> None:
    for name, value in values.items():
        field = browser.find_element(By.ID, f"field-{name}")
        field.clear()
        field.send_keys(str(value))


def fill_and_test(browser: webdriver.Chrome, vendor: str, values: dict[str, Any]) -> None:
    """Pick ``vendor``, fill the form in, press Test and wait until every check passed."""
    Select(browser.find_element(By.ID, "vendor")).select_by_value(vendor)
    fill(browser, values)
    browser.find_element(By.ID, "test").click()
    wait(browser, lambda b: "Every check passed" in text_of(b, "status"), "the test should pass")
