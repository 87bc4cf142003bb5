#!/usr/bin/env bash
# Every benchmark command README prints, at a smoke size, so that a
# refactor that breaks one fails the test command (tools/run-tests.sh runs
# this after the functional tests).  No figure is asserted: each command
# must run to its table and exit 0, which it does only when its own checks
# hold (nothing left after teardown, nothing landing after a fence, the
# reimaged content verified, every seeded audit case found).
# Last line: "benchmarks: N ran, N failed".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-python}

SMOKE=(
    "benchmarks/tgt_force_detach.py --sizes 1"
    "benchmarks/api_force_detach.py --volumes 2 --no-baseline"
    "benchmarks/rbd_force_detach.py --sizes 1 --rounds 1 --window 2 --file-scheme-sizes= --full-write-sizes="
    "benchmarks/audit_scale.py --sizes 1000 --real-targets 100"
)
if [ -f benchmarks/rbd_host_fence.py ]; then
    SMOKE+=("benchmarks/rbd_host_fence.py --volumes 5")
fi

ran=0; failed=0
for command in "${SMOKE[@]}"; do
    echo "-- $command"
    start=$SECONDS
    # shellcheck disable=SC2086
    if $PYTHON $command; then
        echo "-- ok ($((SECONDS - start)) s): $command"
    else
        echo "-- FAILED ($((SECONDS - start)) s): $command"
        failed=$((failed + 1))
    fi
    ran=$((ran + 1))
done
echo "benchmarks: $ran ran, $failed failed"
[ $failed = 0 ]
