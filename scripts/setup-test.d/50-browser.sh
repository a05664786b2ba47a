#!/usr/bin/env bash
# The browser tests' browser: Debian's chromium and chromium-driver (tests/support/browser.py drives them with
# Selenium, headless). Only tests need it: skipped when APPLIANCE_SETUP_TEST_TOOLS=0 (a device image, the aarch64
# root). A no-op once both are installed.
set -euo pipefail
if [ "${APPLIANCE_SETUP_TEST_TOOLS:-1}" = "0" ]; then
  exit 0
fi
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
echo "setup: installing chromium and chromium-driver for the browser tests"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null; then
  $SUDO apt-get update -qq  # a fresh host has no package lists yet
  $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
