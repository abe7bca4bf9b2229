"""A real headless browser for the dashboard's tests: Debian's chromium, driven by Selenium
through Debian's chromedriver (`apt-get install chromium chromium-driver`; .ci/run does).

Selenium is told both paths, so its manager never looks for (or downloads) a browser or a
driver. Each browser gets a fresh profile folder; as root, chromium needs --no-sandbox.
Screenshots go to $CLORE_RUN_SCREENSHOTS when it is set, else to a folder under pytest's tmp.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1360,900",
)


def find_browser() -> tuple[str, str] | str:
    """(chromium, chromedriver), or why there is none."""
    chromium = next((p for n in CHROMIUM_NAMES if (p := shutil.which(n))), None)
    driver = shutil.which("chromedriver") or (
        "/usr/lib/chromium/chromedriver"
        if Path("/usr/lib/chromium/chromedriver").exists()
        else None
    )
    if chromium is None or driver is None:
        return "no chromium and chromedriver here: apt-get install chromium chromium-driver"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -e '.[test]'"
    return chromium, driver


def need_browser() -> tuple[str, str]:
    found = find_browser()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@contextmanager
def chromium(extra_flags: tuple[str, ...] = ()) -> Iterator[Any]:
    """A headless chromium under Selenium, with a fresh profile; quit on exit."""
    binary, driver_path = need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="clore-run-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (*FLAGS, *extra_flags, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot_dir(tmp_root: Path) -> Path:
    folder = Path(os.environ.get("CLORE_RUN_SCREENSHOTS") or tmp_root / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
