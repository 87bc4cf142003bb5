#!/usr/bin/env bash
# README's test command: installs what is missing, then runs pep8, the unit
# tests, upstream Cinder's own driver tests against our drop-in drivers
# (tests/upstream), the functional tests (real Cinder services
# in-process, real tgtd, live qemu-io initiators, real single-node Ceph)
# and real tempest (tempest.api.volume against the box with keystone,
# glance and MariaDB: tools/run_tempest.py).
# Prints one closing line
#     tests: N passed, N failed, N skipped, N expected failures[; pep8: FAILED]
#            [; tempest: ran N, passed P, skipped S, failed F]
# (expected failures: upstream tests listed in tests/upstream/differences.txt
# that failed with the very exception listed there; not counted as passed.
# A listed test that fails otherwise, or passes, is a failure.)
# and exits non-zero when pep8 failed, a test failed, a test run could not
# run (e.g. an import error during discovery: counted as 1 failure), or a
# test was skipped (set ALLOW_SKIPS=1 to accept skips).
#
# Each stestr run is counted exactly once, from the subunit stream of that
# very run (never from "stestr last", which would re-count an older run).
#
# Usage: tools/run-tests.sh [--no-install] [--fast] [stestr filter...]
# (a filter goes to every run; a run it matches no test of fails, as
# before: the closing line counts it as 1 failure)
#   --fast       the developers' tier: pep8, unit and upstream tests only
#                (the closing line says what was not run)
# Each stage prints its wall time, and a "stages:" line lists them all
# before the closing line.  After the functional tests every benchmark
# command README prints runs at a smoke size (tools/benchmark-smoke.sh):
# no figure is asserted, only that it runs to its table and that its own
# checks (nothing left after teardown, nothing landing after a fence,
# content verified) hold; "; benchmarks: N ran, N failed" in the
# closing line.  Tempest starts in the background before the functional
# tests (at nice 10) and its output follows the benchmarks'.
# Environment:
#   ALLOW_SKIPS=1            skipped tests do not fail the run
#   SKIP_PEP8=1              do not run flake8 (the closing line says so)
#   SKIP_TEMPEST=1           do not run tempest (the closing line says so;
#                            a stestr filter skips it too)
#   UNIT_TEST_PATH           default ./tests/unit
#   UPSTREAM_TEST_PATH       default ./tests/upstream
#   FUNCTIONAL_TEST_PATH     default ./tests/functional
#   FUNCTIONAL_CONCURRENCY   default: the three workers of
#                            FUNCTIONAL_TEST_PATH/workers.yaml, else 2
#   VENV                     default .venv
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
VENV=${VENV:-.venv}
install=1; fast=0
while [ $# -gt 0 ]; do
    case $1 in
        --no-install) install=0; shift ;;
        --fast) fast=1; shift ;;
        *) break ;;
    esac
done
stages=""
# stage_done NAME START: record and print a stage's wall time.
stage_done() {
    local seconds=$((SECONDS - $2))
    stages="${stages:+$stages, }$1 ${seconds} s"
    echo "-- $1: ${seconds} s"
}
if [ $install = 1 ]; then
    t0=$SECONDS
    tools/install-deps.sh "$VENV" || exit 1
    if [ -x tools/install-ceph.sh ]; then
        tools/install-ceph.sh "$VENV" || exit 1
    fi
    stage_done install $t0
fi
case $VENV in
    /*) export PATH="$VENV/bin:$PATH" ;;
    *) export PATH="$PWD/$VENV/bin:$PATH" ;;
esac
UNIT_TEST_PATH=${UNIT_TEST_PATH:-./tests/unit}
UPSTREAM_TEST_PATH=${UPSTREAM_TEST_PATH:-./tests/upstream}
FUNCTIONAL_TEST_PATH=${FUNCTIONAL_TEST_PATH:-./tests/functional}

passed=0; failed=0; skipped=0; xfailed=0; rc=0; pep8=""
work=$(mktemp -d "${TMPDIR:-/tmp}/run-tests.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
: > "$work/skipped"
: > "$work/failed"

# Live display of a subunit stream (stestr's own subunit-trace output).
# "python -m stestr.subunit_trace" lacks an import of subunit.test_results.
display() {
    python -c '
import sys
import subunit.test_results  # noqa: F401
from stestr import subunit_trace
sys.exit(subunit_trace.trace(sys.stdin.buffer, sys.stdout, post_fails=True))
'
}

# Totals of one subunit stream file: prints "PASSED FAILED SKIPPED XFAIL"
# and appends the ids of skipped tests to $2 and of failed tests to $3
# (with the last lines of their traceback).  Final status per test id:
# success passes; xfail (an upstream test listed as an intended difference
# that failed as listed) is an expected failure, counted apart and not as
# passed; fail/uxsuccess/inprogress (no final status: a crashed worker)
# fail; skip is skipped.
totals() {
    python - "$1" "$2" "$3" <<'EOF'
import sys

import subunit
import testtools


class LastStatus(testtools.StreamResult):
    def __init__(self):
        super().__init__()
        self.status_of = {}
        self.traceback_of = {}

    def status(self, test_id=None, test_status=None, file_name=None,
               file_bytes=None, **kwargs):
        if test_id and file_name == 'traceback' and file_bytes:
            self.traceback_of[test_id] = (
                self.traceback_of.get(test_id, b'') + file_bytes)
        if not test_id or not test_status:
            return
        if test_status == 'exists' and test_id in self.status_of:
            return
        self.status_of[test_id] = test_status


def summary(lines):
    """The test's own failing line, the exception's first line, the end.

    A message can be many lines long (a command's stderr): its last lines
    alone do not say which assertion failed.
    """
    frames = [i for i, line in enumerate(lines)
              if line.startswith('  File "') and '/tests/' in line]
    picked = []
    if frames:
        at = frames[-1]
        picked = lines[at:at + 2]
        after = [line for line in lines[at + 2:]
                 if line and not line.startswith(' ')]
        picked += after[:1]
    return picked + [line for line in lines[-3:] if line not in picked]


result = LastStatus()
with open(sys.argv[1], 'rb') as stream:
    result.startTestRun()
    subunit.ByteStreamToStreamResult(
        stream, non_subunit_name='stdout').run(result)
    result.stopTestRun()
counts = {'pass': 0, 'fail': 0, 'skip': 0, 'xfail': 0}
kind = {'success': 'pass', 'xfail': 'xfail', 'skip': 'skip',
        'fail': 'fail', 'uxsuccess': 'fail', 'inprogress': 'fail'}
with open(sys.argv[2], 'a') as skipped, open(sys.argv[3], 'a') as failed:
    for test_id, status in sorted(result.status_of.items()):
        if status in kind:
            counts[kind[status]] += 1
        if status == 'skip':
            skipped.write(test_id + '\n')
        elif kind.get(status) == 'fail':
            lines = result.traceback_of.get(test_id, b'').decode(
                'utf-8', 'replace').strip().splitlines()
            failed.write('%s (%s)\n' % (test_id, status))
            failed.writelines('    %s\n' % line[:300]
                              for line in summary(lines))
print(counts['pass'], counts['fail'], counts['skip'], counts['xfail'])
EOF
}

# run_stestr NAME TEST_PATH [stestr run args...]: run, show, count once.
run_stestr() {
    local name=$1 path=$2 stream="$work/$1.subunit" stestr_rc p f s x
    shift 2
    # tee -p: the stream file is complete even if the display dies.
    stestr --test-path="$path" run --subunit "$@" | tee -p "$stream" | display
    stestr_rc=${PIPESTATUS[0]}
    if ! read -r p f s x < <(totals "$stream" "$work/skipped" \
                                    "$work/failed") \
            || [ -z "${x:-}" ]; then
        echo "$name: cannot read the subunit stream of this run:" \
             "counted as 1 failure"
        echo "$name: the run's subunit stream (unreadable)" >> "$work/failed"
        failed=$((failed + 1)); rc=1
        return
    fi
    passed=$((passed + p)); skipped=$((skipped + s)); xfailed=$((xfailed + x))
    if [ "$f" -gt 0 ]; then
        failed=$((failed + f)); rc=1
    elif [ "$stestr_rc" -ne 0 ] || [ $((p + s + x)) -eq 0 ]; then
        echo "$name: stestr exited $stestr_rc after $((p + s + x)) test(s)" \
             "(discovery/import error, no test matched, or a crash):" \
             "counted as 1 failure"
        echo "$name: the run itself (stestr exited $stestr_rc)" \
            >> "$work/failed"
        failed=$((failed + 1)); rc=1
    fi
}

if [ "${SKIP_PEP8:-0}" = 1 ]; then
    echo "== pep8: not run (SKIP_PEP8=1)"
    pep8="; pep8: not run"
else
    echo "== pep8"
    t0=$SECONDS
    if ! flake8; then echo "pep8: FAILED"; pep8="; pep8: FAILED"; rc=1; fi
    # mypy checks the files its [mypy] section in setup.cfg lists.
    if ! grep -qs '^\[mypy\]' setup.cfg; then
        echo "mypy: not run (no [mypy] section in setup.cfg)"
    elif ! mypy; then
        echo "mypy: FAILED"; pep8="; pep8: FAILED"; rc=1
    fi
    stage_done pep8 $t0
fi

echo "== unit tests"
t0=$SECONDS
run_stestr unit "$UNIT_TEST_PATH" "$@"
stage_done unit $t0

echo "== upstream Cinder's driver tests on our drop-in drivers"
t0=$SECONDS
run_stestr upstream "$UPSTREAM_TEST_PATH" "$@"
stage_done upstream $t0

# Tempest starts before the functional tests, in the background and at
# nice 10: it mostly waits (API round trips, waiters' polls, backups), 25 %
# of the two cores over its 662 s alone in a clean-clone run, against the
# functional tests' ~60 % over their 1592 s; those keep the CPU first.
# Its output is shown once the benchmarks have ended.
tempest=""; tempest_pid=""
if [ $fast = 0 ] && [ -f tools/run_tempest.py ]; then
    if [ "${SKIP_TEMPEST:-0}" = 1 ] || [ $# -gt 0 ]; then
        echo "== tempest: not run (SKIP_TEMPEST=1 or a test filter)"
        tempest="; tempest: not run"
    else
        echo "== tempest started (volume and compute volume tests on the" \
             "--nova box: once on our tgt driver, once on our RBD driver;" \
             "the compute volume tests again on Nova's libvirt driver with" \
             "qemu guests, on our RBD driver); it runs beside the" \
             "functional tests and the benchmarks"
        t_tempest=$SECONDS
        nice -n 10 python tools/run_tempest.py > "$work/tempest.out" 2>&1 &
        tempest_pid=$!
    fi
fi

notrun=""
if [ $fast = 1 ]; then
    echo "== functional tests, benchmarks, tempest: not run (--fast)"
    notrun="; functional, benchmarks, tempest: not run (--fast)"
else
    echo "== functional tests"
    t0=$SECONDS
    # Three workers balanced by tests/functional/workers.yaml, unless
    # FUNCTIONAL_CONCURRENCY asks for another count.
    if [ -z "${FUNCTIONAL_CONCURRENCY:-}" ] \
            && [ -f "$FUNCTIONAL_TEST_PATH/workers.yaml" ]; then
        workers=(--worker-file "$FUNCTIONAL_TEST_PATH/workers.yaml")
    else
        workers=(--concurrency "${FUNCTIONAL_CONCURRENCY:-2}")
    fi
    run_stestr functional "$FUNCTIONAL_TEST_PATH" "${workers[@]}" "$@"
    stage_done functional $t0
fi

benchmarks=""
if [ $fast = 0 ] && [ -x tools/benchmark-smoke.sh ]; then
    if [ $# -gt 0 ]; then
        echo "== benchmarks: not run (a test filter)"
        benchmarks="; benchmarks: not run"
    else
        echo "== benchmarks at smoke size (tools/benchmark-smoke.sh)"
        t0=$SECONDS
        tools/benchmark-smoke.sh | tee "$work/benchmarks.out"
        bench_rc=${PIPESTATUS[0]}
        line=$(grep '^benchmarks: ' "$work/benchmarks.out" | tail -n 1)
        benchmarks="; ${line:-benchmarks: FAILED}"
        if [ "$bench_rc" -ne 0 ] || [ -z "$line" ]; then
            rc=1
        fi
        stage_done benchmarks $t0
    fi
fi

if [ -n "$tempest_pid" ]; then
    echo "== tempest (started before the functional tests)"
    wait "$tempest_pid"
    tempest_rc=$?
    cat "$work/tempest.out"
    line=$(grep '^tempest: ran' "$work/tempest.out" | tail -n 1)
    tempest="; ${line%% (*}"
    if [ "$tempest_rc" -ne 0 ] || [ -z "$line" ]; then
        echo "tempest: FAILED (exit $tempest_rc)"
        tempest="${line:+; ${line%% (*}}; tempest: FAILED"
        rc=1
    fi
    stage_done "tempest (beside the functional tests and benchmarks)" \
        $t_tempest
fi

if [ "$skipped" -gt 0 ]; then
    if [ "${ALLOW_SKIPS:-0}" = 1 ]; then
        echo "skipped: $skipped test(s), allowed by ALLOW_SKIPS=1:"
    else
        echo "skipped: $skipped test(s): the run FAILS on skips" \
             "(set ALLOW_SKIPS=1 to accept them):"
        rc=1
    fi
    head -n 30 "$work/skipped" | sed 's/^/  /'
    if [ "$skipped" -gt 30 ]; then
        echo "  ... and $((skipped - 30)) more"
    fi
fi
if [ -s "$work/failed" ]; then
    # Repeated here: a CI report may show only the run's last lines.
    echo "failed tests:"
    head -n 60 "$work/failed"
fi
if [ "$xfailed" -gt 0 ]; then
    echo "expected failures: $xfailed upstream test(s), not counted as" \
         "passed, each failed with the exception listed with its reason" \
         "in tests/upstream/differences.txt"
fi
echo "stages: $stages"
echo "tests: $passed passed, $failed failed, $skipped skipped," \
     "$xfailed expected failures$pep8$notrun$benchmarks$tempest"
exit $rc
