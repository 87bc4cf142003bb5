#!/usr/bin/env python3
"""os-force_detach latency through Cinder's real API: ours against upstream.

Real Cinder in-process (its WSGI API, scheduler and volume services, the
harness of :mod:`tests.functional.base`) with our tgt iSCSI driver on a
real tgtd.  It creates N volumes (``--volumes``, default 50), attaches
each through the attachments API to its own host and logs a live qemu-io
iSCSI initiator into each.  Then, for every volume, it times
``POST /v3/{project}/volumes/{id}/action {"os-force_detach": {...}}``
(the API call returns after Cinder's terminate_connection and detach RPC
calls, i.e. after the backend teardown):

1. with our driver as it is (revoke ACL and sessions, remove target, LUN
   and CHAP account);
2. on the same volumes, attached and logged in again, with upstream
   behaviour: the same driver with its teardown hooks disabled
   (``revoke_host_access``, ``fence_clients`` and ``remove_export`` do
   nothing), as upstream Cinder's RBD driver does on this path.

It prints p50/p95/mean latency of both, the ratio, and how many initiators
could still write after their force-detach (upstream: all of them).

Usage: .venv/bin/python benchmarks/api_force_detach.py [--volumes 50]
Needs root, tgt, qemu-utils and qemu-block-extra (tools/install-deps.sh).
"""

import argparse
import concurrent.futures
import os
import statistics
import sys
import time
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import cinder.privsep  # noqa: E402

from cinder_forcedetach.drivers import iscsi  # noqa: E402
from tests.functional import base  # noqa: E402

RESULTS = {}


class UpstreamBehaviourTgtISCSIDriver(iscsi.TgtISCSIDriver):
    """Our driver without teardown, like upstream RBD on force-detach."""

    def revoke_host_access(self, volume, connector):
        return False

    def fence_clients(self, volume, connectors, keep_attachments):
        pass

    def remove_export(self, context, volume):
        pass


def percentile(values, pct):
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1,
                       int(round(pct / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[index]


class ApiForceDetachBenchmark(base.CinderTgtTestCase):
    """Not a test: the harness, driven once by main()."""

    volumes = 50

    def setUp(self):
        # tgtadm in-process (root), before the volume service starts.
        cinder.privsep.sys_admin_pctxt.set_client_mode(False)
        self.addCleanup(cinder.privsep.sys_admin_pctxt.set_client_mode, True)
        super(ApiForceDetachBenchmark, self).setUp()

    def _get_flags(self):
        f = super(ApiForceDetachBenchmark, self)._get_flags()
        f['quota_volumes'] = {'v': -1}      # default quota: 10 volumes
        f['quota_gigabytes'] = {'v': -1}
        # The database's default quota class (10 volumes) wins otherwise.
        f['use_default_quota_class'] = {'v': False}
        return f

    def attach_all(self, volume_ids, tag):
        sessions = []
        for i, vol_id in enumerate(volume_ids):
            host = 'bench-%s-%03d' % (tag, i)
            att, info = self.attach(vol_id, host)
            sessions.append((vol_id, att['id'], self.login(info, host)))
        return sessions

    def force_detach_all(self, sessions):
        latencies = []
        for vol_id, att_id, _session in sessions:
            start = time.perf_counter()
            self.force_detach_api(vol_id, attachment_id=att_id)
            latencies.append(time.perf_counter() - start)
        return latencies

    @staticmethod
    def still_writing(sessions):
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(
                lambda s: s[2].write(0x77, offset=65536, timeout=3),
                sessions))
        return sum(1 for r in results if r is True)

    def test_benchmark(self):
        t0 = time.monotonic()
        volume_ids = [self.create_volume()['id']
                      for _ in range(self.volumes)]
        RESULTS['setup_s'] = time.monotonic() - t0

        sessions = self.attach_all(volume_ids, 'a')
        RESULTS['ours'] = self.force_detach_all(sessions)
        RESULTS['ours_writing'] = self.still_writing(sessions)
        RESULTS['ours_targets'] = len(self.driver.target.list_targets())
        for vol_id in volume_ids:
            self.assertEqual('available',
                             self.api.get_volume(vol_id)['status'])

        real_class = self.driver.__class__
        self.driver.__class__ = UpstreamBehaviourTgtISCSIDriver
        self.addCleanup(setattr, self.driver, '__class__', real_class)
        sessions = self.attach_all(volume_ids, 'b')
        RESULTS['upstream'] = self.force_detach_all(sessions)
        RESULTS['upstream_writing'] = self.still_writing(sessions)
        RESULTS['upstream_targets'] = len(self.driver.target.list_targets())
        for vol_id in volume_ids:
            self.assertEqual('available',
                             self.api.get_volume(vol_id)['status'])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--volumes', type=int, default=50)
    args = parser.parse_args()
    ApiForceDetachBenchmark.volumes = args.volumes
    t0 = time.monotonic()
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(
        ApiForceDetachBenchmark('test_benchmark'))
    if not result.wasSuccessful() or 'upstream' not in RESULTS:
        print('benchmark failed', file=sys.stderr)
        return 1
    ms = 1000.0
    rows = []
    for key, label in (('ours', 'cinder-forcedetach'),
                       ('upstream', 'upstream behaviour')):
        lat = RESULTS[key]
        rows.append((label, percentile(lat, 50) * ms, percentile(lat, 95) * ms,
                     statistics.mean(lat) * ms, RESULTS[key + '_writing'],
                     RESULTS[key + '_targets']))
    n = args.volumes
    print('os-force_detach through Cinder\'s API: %d volumes, each with a '
          'live qemu-io iSCSI session (run %.0f s)' % (
              n, time.monotonic() - t0))
    print('%-20s %9s %9s %9s  %-22s %s' % (
        '', 'p50 ms', 'p95 ms', 'mean ms', 'initiators still writing',
        'targets left'))
    for label, p50, p95, mean, writing, targets in rows:
        print('%-20s %9.1f %9.1f %9.1f  %10d/%-11d %d' % (
            label, p50, p95, mean, writing, n, targets))
    ours, up = rows[0], rows[1]
    print('ratio ours/upstream  p50 %.2fx  p95 %.2fx  mean %.2fx' % (
        ours[1] / up[1], ours[2] / up[2], ours[3] / up[3]))
    return 0


if __name__ == '__main__':
    sys.exit(main())
