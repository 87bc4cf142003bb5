#!/usr/bin/env python3
#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""os-force_detach through Cinder's real API: ours against upstream's tgt path.

Real Cinder in-process (its WSGI API, scheduler and volume services over
``fake:/``, the harness of :mod:`tests.functional.base`) on a real tgtd,
loading in turn:

* **ours**: ``cinder_forcedetach.drivers.iscsi.TgtISCSIDriver``;
* **upstream**: ``benchmarks._upstream_tgt_driver.UpstreamTgtDriver``, the
  same sparse-file volumes exported by Cinder's own
  ``cinder.volume.targets.tgt.TgtAdm`` (``target_helper = tgtadm``), called
  as upstream's LVM driver calls it: exports made by ``tgt-admin --update``
  from a config file in ``volumes_dir`` (ACL ``ALL``, CHAP), removed by
  ``tgt-admin --force --delete``;
* **no teardown**: our driver with its teardown hooks disabled
  (``revoke_host_access``, ``fence_clients`` and ``remove_export`` do
  nothing), the old baseline, shown for reference only.

For each, N volumes (``--volumes``, default 50) are attached through the
attachments API (create with connector, then complete), each to its own
host, and a live qemu-io iSCSI initiator logs in with the connection_info
Cinder returned (upstream: its CHAP credentials) and writes.  Then every
volume gets ``POST /v3/{project}/volumes/{id}/action {"os-force_detach":
{"attachment_id": ...}}``, timed one at a time (the call returns after
Cinder's terminate_connection and detach RPC calls, i.e. after the backend
teardown).  Afterwards it counts the initiators that can still write, and
the targets and sessions left on tgtd.  It prints p50/p95/mean of each,
the ratio ours/upstream and the goal (ours p50 < 0.3 s and <= 1.2x
upstream's p50), all computed from the measured numbers.

Upstream's TgtAdm talks to tgtd's default control port 0 and reads
``/etc/tgt/targets.conf``, which includes ``/etc/tgt/conf.d/*.conf``.  The
script therefore re-executes itself in a private mount namespace
(``unshare --mount``) and bind-mounts there a temporary conf.d whose only
file includes its temporary ``volumes_dir``, as devstack's
``/etc/tgt/conf.d/stack.conf`` does: the machine's /etc/tgt is untouched.
It holds the exclusive lock /run/lock/cinder-forcedetach-tgtd-port0.lock
for the whole run (other benchmarks use control port 0 too) and refuses to
run when a tgtd already answers on control port 0.  CHAP passwords are
never printed.

Usage: .venv/bin/python benchmarks/api_force_detach.py [--volumes 50]
           [--no-baseline]
Needs root, tgt, qemu-utils and qemu-block-extra (tools/install-deps.sh).
"""

import argparse
import concurrent.futures
import fcntl
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import fixtures  # noqa: E402

from benchmarks import _upstream_tgt_driver  # noqa: E402
from cinder_forcedetach.drivers import iscsi  # noqa: E402
from tests import fakes  # noqa: E402
from tests.functional import base  # noqa: E402

LOCK_PATH = '/run/lock/cinder-forcedetach-tgtd-port0.lock'
TGT_CONF_D = '/etc/tgt/conf.d'
NAMESPACE_MARK = 'CINDER_FORCEDETACH_BENCH_MOUNT_NS'
UPSTREAM_DRIVER = '%s.%s' % (_upstream_tgt_driver.__name__,
                             _upstream_tgt_driver.UpstreamTgtDriver.__name__)

SIDES = (
    ('ours', 'cinder-forcedetach (TgtISCSIDriver)'),
    ('upstream', 'upstream tgt (TgtAdm, tgt-admin)'),
    ('baseline', 'no teardown (our driver with hooks disabled)'),
)
RESULTS = {}
SECRETS = set()     # CHAP passwords seen: scrubbed from any error output


class NoTeardownTgtISCSIDriver(iscsi.TgtISCSIDriver):
    """Our driver with its force-detach teardown disabled (old baseline)."""

    def revoke_host_access(self, volume, connector):
        return False

    def fence_clients(self, volume, connectors, keep_attachments):
        pass

    def remove_export(self, context, volume):
        pass


def percentile(values, pct):
    """Nearest-rank percentile."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1,
                       int(round(pct / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[index]


def loadavg():
    with open('/proc/loadavg') as f:
        return ' '.join(f.read().split()[:3])


def tgtd_state(tgtd):
    """(targets, sessions) on *tgtd*, from ``tgtadm --op show``."""
    out = tgtd.tgtadm('--op', 'show', '--mode', 'target').stdout
    lines = [line.strip() for line in out.splitlines()]
    return (sum(1 for line in lines if line.startswith('Target ')),
            sum(1 for line in lines if line.startswith('I_T nexus:')))


class ApiForceDetachBenchmark(base.CinderTgtTestCase):
    """Not a test: one run of the harness per driver, driven by main()."""

    volumes = 50
    baseline = True
    upstream_volumes_dir = None     # upstream TgtAdm's target config files

    def setUp(self):
        # The harness's tgtd, on control port 0: upstream's tgt-admin and
        # tgtadm calls have no -C; ours gets forcedetach_tgt_control_port=0.
        self.useFixture(fixtures.MockPatchObject(
            fakes, 'free_tgtd_control_port', lambda: 0))
        super(ApiForceDetachBenchmark, self).setUp()

    def _get_flags(self):
        f = super(ApiForceDetachBenchmark, self)._get_flags()
        f['quota_volumes'] = {'v': -1}      # default quota: 10 volumes
        f['quota_gigabytes'] = {'v': -1}
        # The database's default quota class (10 volumes) wins otherwise.
        f['use_default_quota_class'] = {'v': False}
        if self._testMethodName == 'test_upstream':
            g = base.BACKEND
            f['volume_driver'] = {'v': UPSTREAM_DRIVER, 'g': g}
            f['target_helper'] = {'v': 'tgtadm', 'g': g}
            f['target_protocol'] = {'v': 'iscsi', 'g': g}
            f['volumes_dir'] = {'v': self.upstream_volumes_dir, 'g': g}
        return f

    # -- steps ---------------------------------------------------------------

    def attach_all(self, volume_ids, tag):
        sessions = []
        for i, vol_id in enumerate(volume_ids):
            host = 'bench-%s-%03d' % (tag, i)
            att, info = self.attach(vol_id, host)
            data = info.get('data', info)
            if data.get('auth_password'):
                SECRETS.add(data['auth_password'])
            self.check_export(vol_id, data)
            sessions.append((vol_id, att['id'], self.login(info, host)))
        return sessions

    def check_export(self, volume_id, data):
        """Upstream's exports are made by TgtAdm: CHAP, a config file."""
        if not isinstance(self.driver, _upstream_tgt_driver.UpstreamTgtDriver):
            return
        self.assertEqual('CHAP', data.get('auth_method'))
        self.assertTrue(os.path.isfile(os.path.join(
            self.upstream_volumes_dir, 'volume-%s' % volume_id)))

    def force_detach_all(self, sessions):
        latencies = []
        for vol_id, att_id, _session in sessions:
            start = time.perf_counter()
            self.force_detach_api(vol_id, attachment_id=att_id)
            latencies.append(time.perf_counter() - start)
        return latencies

    @staticmethod
    def still_writing(sessions):
        """(wrote, refused, unproven) of one write per old session.

        Only a positive refusal (the initiator's Outcome) counts as cut;
        a time-out or dead initiator with no refusal seen is unproven: a
        failure of the check, reported apart.
        """
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(
                lambda s: s[2].try_write(0x77, offset=65536, timeout=3,
                                         refusal_wait=35),
                sessions))
        wrote = sum(1 for r in results if r.ok)
        refused = sum(1 for r in results if r.refused)
        return wrote, refused, len(results) - wrote - refused

    def measure(self, key, volume_ids):
        sessions = self.attach_all(volume_ids, key)
        latencies = self.force_detach_all(sessions)
        writing, refused, unproven = self.still_writing(sessions)
        targets, nexus = tgtd_state(self.tgtd)
        RESULTS[key] = {'latencies': latencies, 'writing': writing,
                        'refused': refused, 'unproven': unproven,
                        'targets': targets, 'sessions': nexus}
        for vol_id in volume_ids:
            self.assertEqual('available',
                             self.api.get_volume(vol_id)['status'])

    def create_volumes(self):
        return [self.create_volume()['id'] for _ in range(self.volumes)]

    # -- the runs ------------------------------------------------------------

    def test_upstream(self):
        self.assertIsInstance(self.driver,
                              _upstream_tgt_driver.UpstreamTgtDriver)
        self.measure('upstream', self.create_volumes())

    def test_ours(self):
        self.assertIs(type(self.driver), iscsi.TgtISCSIDriver)
        volume_ids = self.create_volumes()
        self.measure('ours', volume_ids)
        if not self.baseline:
            return
        self.driver.__class__ = NoTeardownTgtISCSIDriver
        self.addCleanup(setattr, self.driver, '__class__',
                        iscsi.TgtISCSIDriver)
        self.measure('baseline', volume_ids)


# -- isolation: mount namespace, lock, control port 0 ----------------------

def reexec_in_mount_namespace():
    """Run this script again in a private mount namespace (root)."""
    env = dict(os.environ, **{NAMESPACE_MARK: '1'})
    argv = ['unshare', '--mount', '--propagation', 'private',
            sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    os.execvpe('unshare', argv, env)


def take_port0_lock():
    os.makedirs(os.path.dirname(LOCK_PATH), exist_ok=True)
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print('waiting for %s ...' % LOCK_PATH, file=sys.stderr)
        fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def refuse_if_port0_taken():
    probe = subprocess.run(['tgtadm', '-C', '0', '--op', 'show', '--mode',
                            'sys'], capture_output=True)
    if probe.returncode == 0:
        sys.exit('a tgtd already answers on control port 0: stop it first')


def private_tgt_conf(workdir):
    """A conf.d, visible only in this namespace, including volumes_dir."""
    volumes_dir = os.path.join(workdir, 'volumes')
    conf_d = os.path.join(workdir, 'conf.d')
    os.mkdir(volumes_dir)
    os.mkdir(conf_d)
    with open(os.path.join(conf_d, 'cinder.conf'), 'w') as f:
        f.write('include %s/*\n' % volumes_dir)
    subprocess.run(['mount', '--bind', conf_d, TGT_CONF_D], check=True)
    return volumes_dir


def scrub(text):
    for secret in SECRETS:
        text = text.replace(secret, '***')
    return text


# -- main --------------------------------------------------------------------

def run(args):
    ApiForceDetachBenchmark.volumes = args.volumes
    ApiForceDetachBenchmark.baseline = not args.no_baseline
    result = unittest.TestResult()
    for name in ('test_upstream', 'test_ours'):
        ApiForceDetachBenchmark(name).run(result)
    for test, trace in result.errors + result.failures:
        print('%s failed:\n%s' % (test.id(), scrub(trace)), file=sys.stderr)
    return result.wasSuccessful()


def report(n, elapsed, load_start):
    ms = 1000.0
    print("os-force_detach through Cinder's API: %d volumes per driver, "
          'each attached through the attachments API with a live qemu-io '
          'iSCSI session (run %.0f s)' % (n, elapsed))
    print('%-45s %8s %8s %8s  %13s %13s %12s %13s' % (
        '', 'p50 ms', 'p95 ms', 'mean ms', 'still writing', 'unproven cut',
        'targets left', 'sessions left'))
    stats = {}
    for key, label in SIDES:
        if key not in RESULTS:
            continue
        r = RESULTS[key]
        lat = r['latencies']
        stats[key] = (percentile(lat, 50), percentile(lat, 95),
                      statistics.mean(lat))
        print('%-45s %8.1f %8.1f %8.1f  %9d/%-3d %9d/%-3d %12d %13d' % (
            label, stats[key][0] * ms, stats[key][1] * ms,
            stats[key][2] * ms, r['writing'], n, r['unproven'], n,
            r['targets'], r['sessions']))
    print('still writing: the write was acknowledged; unproven cut: no '
          'answer and no refusal seen (time-out, dead initiator) -- a '
          'failure of the check, not a cut')
    ours, up = stats['ours'], stats['upstream']
    p50_ratio, p95_ratio = ours[0] / up[0], ours[1] / up[1]
    print('ratio ours/upstream: p50 %.2fx (%.1f / %.1f ms), '
          'p95 %.2fx (%.1f / %.1f ms)' % (
              p50_ratio, ours[0] * ms, up[0] * ms,
              p95_ratio, ours[1] * ms, up[1] * ms))
    print('goal ours p50 < 300 ms: %s; ours p50 <= 1.2x upstream p50: %s' % (
        'met' if ours[0] < 0.3 else 'NOT met',
        'met' if p50_ratio <= 1.2 else 'NOT met'))
    print('load average: %s at start, %s at end' % (load_start, loadavg()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--volumes', type=int, default=50)
    parser.add_argument('--no-baseline', action='store_true',
                        help='skip the no-teardown column')
    args = parser.parse_args()
    if os.environ.get(NAMESPACE_MARK) != '1':
        reexec_in_mount_namespace()
    lock_fd = take_port0_lock()
    try:
        refuse_if_port0_taken()
        workdir = tempfile.mkdtemp(prefix='bench-api-force-detach-')
        load_start = loadavg()
        t0 = time.monotonic()
        try:
            ApiForceDetachBenchmark.upstream_volumes_dir = (
                private_tgt_conf(workdir))
            ok = run(args)
        finally:
            subprocess.run(['umount', TGT_CONF_D], capture_output=True)
            shutil.rmtree(workdir, ignore_errors=True)
        if not ok or 'ours' not in RESULTS or 'upstream' not in RESULTS:
            print('benchmark failed', file=sys.stderr)
            return 1
        report(args.volumes, time.monotonic() - t0, load_start)
        return 0
    finally:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
        os.close(lock_fd)


if __name__ == '__main__':
    sys.exit(main())
