#!/bin/bash
# Install the Debian Ceph packages needed by tools/ceph-dev.sh (single-node
# development cluster) and, optionally, make the Debian rados/rbd Python
# bindings importable from a virtualenv.
#
# Usage: tools/install-ceph.sh [VENV]
#
# Idempotent: when every package is already installed no apt command runs;
# `apt-get update` only runs when apt has no install candidate for ceph-mon.
#
# Why the .pth trick: Debian ships rados/rbd only as CPython 3.11 extension
# modules under /usr/lib/python3/dist-packages.  A venv created from another
# python 3.11 build (e.g. pyenv) cannot use --system-site-packages for them,
# and adding the whole dist-packages directory would drag every Debian module
# into the venv.  So a private directory holds symlinks to just the two .so
# files and a .pth file in the venv's site-packages names that directory.
set -euo pipefail

PACKAGES=(ceph-mon ceph-osd ceph-mgr python3-rbd python3-rados ceph-common
          qemu-utils qemu-block-extra)
DIST=/usr/lib/python3/dist-packages
MODULES=(rados.cpython-311-x86_64-linux-gnu.so rbd.cpython-311-x86_64-linux-gnu.so)

log() { printf 'install-ceph: %s\n' "$*" >&2; }

missing_packages() {
    local p status
    for p in "${PACKAGES[@]}"; do
        status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
        [ "$status" = installed ] || printf '%s\n' "$p"
    done
}

install_packages() {
    local missing
    missing=$(missing_packages)
    if [ -z "$missing" ]; then
        log "all packages already installed"
        return 0
    fi
    log "missing packages: $(echo $missing)"
    if [ "$(id -u)" -ne 0 ]; then
        log "must run as root to install packages"
        return 1
    fi
    local candidate
    candidate=$(apt-cache policy ceph-mon 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
        log "no apt candidate for ceph-mon: running apt-get update"
        apt-get update
    fi
    # The ceph postinst prints "Failed to connect to bus" without systemd:
    # harmless, nothing is enabled or started by it here.
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        "${PACKAGES[@]}"
    missing=$(missing_packages)
    if [ -n "$missing" ]; then
        log "still missing after install: $(echo $missing)"
        return 1
    fi
}

link_into_venv() {
    local venv py ver site dir m
    # .pth entries are resolved against site-packages: use absolute paths.
    venv=$(cd "$1" && pwd)
    py="$venv/bin/python"
    if [ ! -x "$py" ]; then
        log "no python at $py"
        return 1
    fi
    ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if [ "$ver" != 3.11 ]; then
        log "$venv is python $ver; the Debian modules are built for CPython 3.11"
        return 1
    fi
    site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    dir="$venv/lib/debian-ceph-modules"
    mkdir -p "$dir"
    for m in "${MODULES[@]}"; do
        if [ ! -e "$DIST/$m" ]; then
            log "$DIST/$m not found (python3-rados/python3-rbd installed?)"
            return 1
        fi
        ln -sfn "$DIST/$m" "$dir/$m"
    done
    printf '%s\n' "$dir" > "$site/debian-ceph-modules.pth"
    "$py" -c 'import rados, rbd' || {
        log "import rados, rbd failed in $venv"
        return 1
    }
    log "rados and rbd importable from $venv (via $site/debian-ceph-modules.pth)"
}

install_packages
if [ $# -ge 1 ] && [ -n "$1" ]; then
    link_into_venv "$1"
fi
