#!/usr/bin/env bash
# Installs what invar needs on Debian 12: build tools and libraries (Debian packages) and
# the Python test oracles (PyPI, in .venv). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
PKGS="build-essential cmake pkg-config clang libclang-rt-14-dev libcjson-dev libcmocka-dev libxxhash-dev libmicrohttpd-dev libutf8proc-dev python3 python3-venv python3-pip"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    echo "installing Debian packages:$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
