#!/usr/bin/env bash
# Opt-in: installs a headless browser for the real-browser test of the HTML report
# (tests/analysis/test_browse_results.py; skipped without one): Debian's chromium + chromium-driver, and selenium
# from PyPI. Needs root (apt-get); nothing else of the project needs a browser.
#   bash tools/install_browser.sh        (or: bash tools/setup_env.sh --with-browser)
set -euo pipefail
PY=${PYTHON:-python3}
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
echo "[browser] chromium, chromium-driver (apt-get)"
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y chromium chromium-driver
fi
echo "[browser] selenium (pip)"
"$PY" -c "import selenium" >/dev/null 2>&1 || "$PY" -m pip install --disable-pip-version-check -q selenium
echo "[browser] $(chromium --version 2>/dev/null || echo 'chromium: not found')"
