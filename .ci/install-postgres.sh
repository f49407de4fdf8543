#!/usr/bin/env bash
# Install Debian's `postgresql` package when its server binaries are missing (idempotent,
# non-interactive). The tuner's tests start a throwaway cluster with initdb + pg_ctl and are
# skipped, with a message, only where this cannot install the package.
set -euo pipefail

have_server() {
    command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && return 0
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}

if have_server; then
    echo "install-postgres: server binaries present ($(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | head -1))"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "install-postgres: not root and no password-less sudo; cannot install postgresql" >&2
        exit 1
    fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-postgres: no apt-get on this machine; install PostgreSQL by hand" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# The package's post-install creates a default cluster; the tests never use it.
$SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
have_server && echo "install-postgres: installed $(ls -d /usr/lib/postgresql/*/bin | head -1)"
