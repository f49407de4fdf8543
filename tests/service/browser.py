"""A real headless Chromium (Debian's chromium + chromium-driver, installed by
.ci/install-chromium.sh) driven by Selenium, for the planning page's tests. Screenshots go to
`artifacts/browser/` at the repository root (gitignored; CI keeps them as artifacts)."""

from __future__ import annotations

import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "browser"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage")


def _find(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name) or (name if Path(name).is_file() else None)
        if found:
            return found
    return None


@contextmanager
def chromium(download_dir: Path, width: int = 1500, height: int = 2400):
    """A Selenium WebDriver on the system Chromium, downloads going to `download_dir`;
    skips (one line) where no browser is installed."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
    from selenium.webdriver.chrome.service import Service

    binary = _find("/usr/bin/chromium", "chromium", "chromium-browser")
    driver_path = _find("/usr/bin/chromedriver", "chromedriver")
    if binary is None or driver_path is None:
        pytest.skip("no chromium/chromedriver on this machine (.ci/install-chromium.sh could not install them)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    options.add_experimental_option("prefs", {"download.default_directory": str(download_dir),
                                              "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(download_dir)})
        yield driver
    finally:
        driver.quit()


def wait_for(driver, script: str, timeout_s: float = 60, what: str = ""):
    """Poll a JavaScript expression until it is truthy; its value, or a failure saying `what`."""
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout_s, poll_frequency=0.2).until(lambda d: d.execute_script("return " + script))
    except Exception as e:  # TimeoutException: say what the page shows
        status = driver.execute_script("return (document.getElementById('status')||{}).textContent")
        raise AssertionError(f"timed out waiting for {what or script} (page status: {status!r})") from e


def wait_for_file(folder: Path, pattern: str, timeout_s: float = 30) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = [p for p in folder.glob(pattern) if not p.name.endswith(".crdownload")]
        if done:
            return done[0]
        time.sleep(0.2)
    raise AssertionError(f"no {pattern} downloaded into {folder} (found: {sorted(p.name for p in folder.iterdir())})")


def screenshot(driver, name: str) -> Path:
    """A full-page PNG under artifacts/browser/."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return Math.max(document.body.scrollHeight, 800)")
    driver.set_window_size(1500, min(int(height) + 40, 6000))
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    return path
