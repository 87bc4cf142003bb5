#!/usr/bin/env bash
# Install everything the project needs on a fresh Debian 12 machine:
# system packages (tgt, userspace iSCSI initiators, qemu-img, open-iscsi
# for os-brick's iscsiadm calls, gcc and libc6-dev for the RBD tests'
# LD_PRELOAD shim, MariaDB and etcd for the clustered box; qemu, libvirt
# (and its headers for libvirt-python), a kernel and busybox for the
# guests of --virt libvirt; Chromium and its chromedriver for the Horizon
# test's browser) and a venv with
# this package, real Cinder, the test requirements and the developer box
# (devbox/).  Idempotent; a second run takes about a second.
#
# Usage: tools/install-deps.sh [VENV]     (default: ./.venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-${VENV:-.venv}}
PYTHON=${PYTHON:-python3}

APT_PACKAGES=(tgt libiscsi-bin qemu-utils qemu-block-extra open-iscsi
              gcc libc6-dev mariadb-server etcd-server
              qemu-system-x86 libvirt-daemon-system libvirt-clients
              libvirt-dev pkg-config linux-image-amd64 busybox-static
              iptables
              chromium chromium-driver)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
        || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: apt packages: ${missing[*]}"
    if ! apt-cache policy "${missing[0]}" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        apt-get update -qq
    fi
    # MariaDB's and etcd's packages would start system-wide daemons: forbid
    # service starts during the install (Debian's policy-rc.d interface);
    # tools/stack.sh starts its own on loopback.
    created_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        created_policy=1
    fi
    rc=0
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
    [ $created_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
    [ $rc = 0 ] || { echo "install-deps: apt-get failed ($rc)" >&2; exit $rc; }
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "install-deps: creating venv $VENV"
    "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.cinder-forcedetach-deps"
want=$(cat requirements.txt test-requirements.txt setup.cfg \
             devbox/pyproject.toml | sha1sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "install-deps: pip install (cinder, os-brick, test requirements)"
    "$VENV/bin/pip" install -q --disable-pip-version-check \
        -r requirements.txt -r test-requirements.txt
    "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -e .
    # The developer box: a distribution of its own (not in the wheel a
    # Cinder node installs), for its Neutron mechanism driver's entry point.
    "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps \
        -e ./devbox
    "$VENV/bin/pip" check >/dev/null
    echo "$want" > "$stamp"
fi
echo "install-deps: ready ($VENV)"
