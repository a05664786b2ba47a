"""Headless Chromium from Debian's packages (chromium, chromium-driver) driven by Selenium: the tests' one
browser. Missing, it fails the test (scripts/setup-test.d/50-browser.sh installs it), never skips."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import cv2
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SHOT_WIDTH = 1000
SCREENSHOTS_ENV = "APPLIANCE_UI_SCREENSHOTS"  # e.g. docs/images: screenshots are refreshed there too


def chromium(width: int = 1400, height: int = 900) -> webdriver.Chrome:
    """A fresh headless Chromium; fails with what to run when the packages are missing."""
    for path in (CHROMIUM, CHROMEDRIVER):
        assert path.is_file(), \
            f"{path} is missing: run scripts/setup-test-tools.sh (scripts/setup-test.d/50-browser.sh)"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def save_screenshot(driver: webdriver.Chrome, artifacts: Path, name: str) -> Path:
    """``<artifacts>/<name>``, and a copy in $APPLIANCE_UI_SCREENSHOTS when that is set."""
    artifacts.mkdir(parents=True, exist_ok=True)
    path = artifacts / name
    assert driver.save_screenshot(str(path)), f"no screenshot {path}"
    image = cv2.imread(str(path))
    if image.shape[1] > SHOT_WIDTH:  # small enough to keep in git: the page at 1000 px wide
        image = cv2.resize(image, (SHOT_WIDTH, round(image.shape[0] * SHOT_WIDTH / image.shape[1])),
                           interpolation=cv2.INTER_AREA)
    image = (image // 16) * 16  # 16 levels a channel: a third of the bytes, and the page still reads as it is
    cv2.imwrite(str(path), image, [cv2.IMWRITE_PNG_COMPRESSION, 9])
    target = os.environ.get(SCREENSHOTS_ENV)
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / name)
    return path
