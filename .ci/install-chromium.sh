#!/usr/bin/env bash
# Install Debian's `chromium` and `chromium-driver` when missing (idempotent, non-interactive),
# for the planning page's browser tests (tests/service/test_page_browser.py), which are skipped,
# with a message, only where this cannot install them.
set -euo pipefail

have_browser() {
    command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1
}

if have_browser; then
    echo "install-chromium: $(chromium --version 2>/dev/null | head -1) and chromedriver present"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "install-chromium: not root and no password-less sudo; cannot install chromium" >&2
        exit 1
    fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-chromium: no apt-get on this machine; install chromium and chromedriver by hand" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
have_browser && echo "install-chromium: installed $(chromium --version 2>/dev/null | head -1)"
