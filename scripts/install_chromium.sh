#!/usr/bin/env bash
# Install Debian's Chromium (+ chromium-driver) for the playground's browser test, unless it is there.
# Idempotent: a machine that has chromium only prints its version. Uses sudo only when not root.
# Playwright drives this binary (executable_path); its own browser download needs the internet.
set -euo pipefail

if ! command -v chromium >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install_chromium.sh: no chromium and no apt-get; install Chromium with your package manager" >&2
        exit 1
    fi
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "install_chromium.sh: not root and no sudo; run as root: apt-get install -y chromium chromium-driver" >&2
            exit 1
        fi
        SUDO="sudo"
    fi
    echo "installing Debian's chromium and chromium-driver with apt-get"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver
fi

chromium --version
