#!/bin/sh
# Install what the end-to-end admin test needs: Debian's Chromium + chromedriver
# (apt-get) and Playwright for Python (pip) into the virtualenv given as $1.
# The test drives /usr/bin/chromium directly: `playwright install` is never run.
#
#   .ci/install-browser.sh /path/to/venv
set -eu

VENV="${1:-}"   # optional: playwright is also in the dev dependency group
SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi

if [ ! -x /usr/bin/chromium ]; then
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends \
        chromium chromium-driver
fi

/usr/bin/chromium --version
if [ -n "$VENV" ]; then
    "$VENV/bin/python" -m pip install --quiet "playwright>=1.40"
    "$VENV/bin/python" -c "from importlib.metadata import version; print('playwright', version('playwright'))"
fi
