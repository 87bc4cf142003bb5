#!/bin/bash
# Cinder in a box: real cinder-api, cinder-scheduler and cinder-volume with
# the cinder-forcedetach tgt iSCSI driver, on a project-started rabbitmq and
# tgtd, all on loopback, all state under ./state (git-ignored).
#
# Usage: tools/stack.sh [--state-dir DIR] up [options] | down [--purge] | status | env
#        tools/stack.sh install
#
#   up      install what is missing (apt: rabbitmq-server tgt libiscsi-bin
#           qemu-utils qemu-block-extra; a venv at ./.venv with this repo
#           installed), start everything, wait until the volume services are
#           up, print the endpoint and a client command.  Idempotent.
#   down    stop exactly the processes `up` started (pid files).
#   status  report each service; exit 0 when everything is up, 3 otherwise.
#   env     print `export OS_...` lines: eval "$(tools/stack.sh env)".
#   install only the install step of `up` (and Ceph's packages), e.g. once
#           before several boxes come up side by side with
#           STACK_SKIP_INSTALL=1 (their pip runs would race in the venv).
#
# Ports, directories and backends: STACK_* variables or `up` options, see
# `tools/stack.sh up --help` and doc/deployment.md.  STACK_SKIP_INSTALL=1
# skips the install step.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${STACK_VENV:-$ROOT/.venv}
APT_PACKAGES=(rabbitmq-server tgt libiscsi-bin qemu-utils qemu-block-extra)

log() { printf 'stack: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

missing_packages() {
    local p status
    for p in "${APT_PACKAGES[@]}"; do
        status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
        [ "$status" = installed ] || printf '%s\n' "$p"
    done
}

install_packages() {
    local missing created_policy=0
    mapfile -t missing < <(missing_packages)
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get"
    [ "$(id -u)" = 0 ] || die "missing packages ${missing[*]}: run as root to install them"
    log "installing ${missing[*]}"
    # The Debian packages would start system-wide daemons (rabbitmq on all
    # interfaces): forbid service starts during the install, as Debian's
    # policy-rc.d interface allows, unless a policy is already in place.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        created_policy=1
    fi
    local rc=0
    if ! apt-cache policy "${missing[0]}" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        apt-get update -qq || rc=$?
    fi
    if [ $rc = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends "${missing[@]}" >&2 || rc=$?
    fi
    [ $created_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
    [ $rc = 0 ] || die "apt-get failed (rc $rc) installing ${missing[*]}"
}

venv_ok() {
    [ -x "$VENV/bin/python" ] && [ -x "$VENV/bin/cinder-api" ] &&
        "$VENV/bin/python" -c 'import cinder_forcedetach.drivers.iscsi, kombu' \
            >/dev/null 2>&1
}

install_venv() {
    # venv_ok imports Cinder (3 s): once when nothing is missing, and once
    # more only after an install.
    local installed=0
    if ! venv_ok; then
        if [ ! -x "$VENV/bin/python" ]; then
            local py
            py=$(command -v python3) || die "python3 not found"
            log "creating the venv $VENV"
            "$py" -m venv "$VENV"
        fi
        log "installing this repo into $VENV (pip install -e .)"
        "$VENV/bin/pip" install -q -e "$ROOT" >&2
        installed=1
    fi
    # The client the printed command uses.
    if [ ! -x "$VENV/bin/cinder" ]; then
        log "installing python-cinderclient into $VENV"
        "$VENV/bin/pip" install -q 'python-cinderclient>=9.10.0' >&2
        installed=1
    fi
    [ $installed = 0 ] || venv_ok ||
        die "the venv $VENV cannot import the driver after install"
}

ensure_installed() {
    [ "${STACK_SKIP_INSTALL:-0}" = 1 ] && return 0
    if [ -f "$ROOT/tools/install-deps.sh" ]; then
        log "running tools/install-deps.sh"
        bash "$ROOT/tools/install-deps.sh" "$VENV" >&2 || die "tools/install-deps.sh failed"
    fi
    install_packages
    install_venv
}

command_of() {
    # The first argument that is not an option (or an option's value).
    local a skip=0
    for a in "$@"; do
        if [ $skip = 1 ]; then skip=0; continue; fi
        case "$a" in
            --state-dir) skip=1 ;;
            -*) ;;
            *) printf '%s' "$a"; return ;;
        esac
    done
}

case "$(command_of "$@")" in
    up) ensure_installed ;;
    install)
        STACK_SKIP_INSTALL=0 ensure_installed
        if [ -x "$ROOT/tools/install-ceph.sh" ]; then
            bash "$ROOT/tools/install-ceph.sh" "$VENV" >&2 \
                || die "tools/install-ceph.sh failed"
        fi
        exit 0 ;;
esac

PY="$VENV/bin/python"
# down/status/env only need the standard library: fall back to python3.
[ -x "$PY" ] || PY=$(command -v python3)
cd "$ROOT"
exec "$PY" -m devbox.stack "$@"
