#!/usr/bin/env bash
# README's test command: installs what is missing, then runs pep8, the unit
# tests and the functional tests (real Cinder services in-process, real
# tgtd, live qemu-io initiators, real single-node Ceph when installed).
# Prints one closing line "tests: N passed, N failed".
#
# Usage: tools/run-tests.sh [--no-install] [stestr filter...]
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
if [ "${1:-}" = "--no-install" ]; then shift; else
    tools/install-deps.sh "$VENV" || exit 1
    if [ -x tools/install-ceph.sh ]; then
        tools/install-ceph.sh "$VENV" || exit 1
    fi
fi
export PATH="$PWD/$VENV/bin:$PATH"
passed=0; failed=0; rc=0

count() {  # add the last stestr run's totals
    local stats
    stats=$(stestr last --subunit | subunit-stats 2>/dev/null)
    passed=$((passed + $(awk '/^Passed tests:/ {print $3}' <<<"$stats")))
    failed=$((failed + $(awk '/^Failed tests:/ {print $3}' <<<"$stats")))
}

echo "== pep8"
if ! flake8; then echo "pep8: FAILED"; rc=1; fi

echo "== unit tests"
stestr --test-path=./tests/unit run "$@" || rc=1
count

echo "== functional tests"
stestr --test-path=./tests/functional run --concurrency "${FUNCTIONAL_CONCURRENCY:-2}" "$@" || rc=1
count

echo "tests: $passed passed, $failed failed"
exit $rc
