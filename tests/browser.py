"""Headless Chromium through Selenium, for the tests that read pages as people do."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

WAIT_S = 60.0  # the dashboard's bundle is 2 MB of JavaScript; a loaded CI machine is slow
# Every host but 127.0.0.1 fails to resolve, and anything sent through a proxy goes to a closed
# port: the browser of a cluster without internet, that still reaches a local server.
OFFLINE_ARGS = ("--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=127.0.0.1")


def need(what: str, found: bool) -> None:
    """Skipped where absent, a failure in CI (the rule the real engines follow)."""
    if not found:
        hint = "apt-get install -y chromium chromium-driver; pip install selenium"
        if os.environ.get("CI"):
            pytest.fail(f"{what} is missing; CI must have it ({hint})")
        pytest.skip(f"{what} not installed ({hint})")


def _tool(*names: str) -> str | None:
    return next((p for n in names if (p := shutil.which(n) or (n if Path(n).exists() else None))),
                None)


def chromium(*extra_args: str) -> Any:
    """A headless Chromium driver (the caller quits it), or a skip where none is installed."""
    binary = _tool("/usr/bin/chromium", "chromium")
    driver_path = _tool("/usr/bin/chromedriver", "chromedriver")
    need("chromium", binary is not None)
    need("chromedriver", driver_path is not None)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        need("selenium", False)
    options = webdriver.ChromeOptions()
    options.binary_location = str(binary)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--allow-file-access-from-files", *extra_args):
        options.add_argument(arg)
    # A given driver path keeps Selenium Manager from looking for one on the network.
    driver = webdriver.Chrome(service=Service(str(driver_path)), options=options)
    driver.set_page_load_timeout(WAIT_S)
    return driver


def wait_for(driver: Any, condition: Any, what: str,
             on_timeout: Callable[[Any], None] | None = None) -> Any:
    """The condition's value once it holds; on a timeout (after `on_timeout`, e.g. a
    screenshot) a failure that quotes what the page said."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, WAIT_S, poll_frequency=0.25).until(condition)
    except TimeoutException:
        if on_timeout is not None:
            on_timeout(driver)
        body = driver.find_element("tag name", "body").text[:2000]
        pytest.fail(f"timed out waiting for {what}; the page said:\n{body}")
