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

"""The conformance kit on our RBD driver, on the real single-node Ceph.

:class:`~cinder_forcedetach.drivers.rbd.RBDDriver` (upstream's RBD driver
with our fencing) in Cinder's in-process services, on the cluster of
:func:`tests.support.ceph.get_cluster`, read by
:class:`~cinder_forcedetach.conformance.rbd_probe.RBDProbe`: each attached
host is a live librbd client in a subprocess, bound by the tests' shim to
the host's own loopback address; access is a watcher of the image header
that the OSD blocklist does not name.  Every check must pass, the fencing
one included (R1 ``idempotent_fence_clients`` is not n/a here: RBD clients
survive the revoke, which is a no-op, and only the fence cuts them off).
A driver that says it fences and does not fails the kit, and one that
cannot list a volume's holders (so its grant cuts nobody) fails R8: the
first host's client still writes after the second host's grant.
"""

from cinder_forcedetach.conformance import harness
from cinder_forcedetach.conformance import rbd_probe
from cinder_forcedetach.conformance import runner
from cinder_forcedetach.drivers import rbd as rbd_driver
from tests.functional import test_conformance
from tests.support import ceph

try:
    import rbd
except ImportError:  # pragma: no cover - depends on the host
    rbd = None

RBD_DRIVER = 'cinder_forcedetach.drivers.rbd.RBDDriver'


class NonFencingRBDDriver(rbd_driver.RBDDriver):
    """Broken: overrides fence_clients (so declares fencing), fences none."""

    def fence_clients(self, volume, connectors, keep_attachments):
        return []


class NoGrantFenceRBDDriver(rbd_driver.RBDDriver):
    """Broken: cannot tell who holds a volume, so a grant cuts nobody."""

    def volume_holders(self, volume):
        return None


class RBDConformanceTestCase(test_conformance._KitTestCase):
    """The kit's every check on RBDDriver, with live clients per host."""

    @classmethod
    def setUpClass(cls):
        super(RBDConformanceTestCase, cls).setUpClass()
        cls.cluster = ceph.get_cluster()

    def setUp(self):
        super(RBDConformanceTestCase, self).setUp()
        if not self.cluster.shim:
            self.fail('the bind shim (gcc) is needed to give each host '
                      'its own address')

    def target(self, driver=RBD_DRIVER):
        c = self.cluster
        probe = rbd_probe.RBDProbe()
        probe.bind_shim = c.shim
        probe.timeout = 10
        options = {'rbd_ceph_conf': c.conf, 'rbd_user': c.user,
                   'rbd_pool': c.pool, 'forcedetach_rbd_keyring': c.keyring,
                   'forcedetach_rbd_timeout': '10',
                   'forcedetach_rbd_fence_verify_timeout': '10.0',
                   'forcedetach_rbd_blocklist_expire_seconds': '3600',
                   'volume_backend_name': 'rbd-conformance'}
        return harness.Target(driver, options, probe=probe,
                              name='rbd-conformance')

    def images(self):
        client = self.cluster.connect()
        try:
            with client.open_ioctx(self.cluster.pool) as ioctx:
                return set(rbd.RBD().list(ioctx))
        finally:
            client.shutdown()

    def test_rbd_driver_passes_every_rule(self):
        before = self.images()
        target = self.target()
        rows = self.run_kit(target)
        self.assertEqual({'protocol': 'rbd', 'fencing': True,
                          'multiattach': True},
                         {k: target.resolved.get(k) for k in
                          ('protocol', 'fencing', 'multiattach')})
        self.assertEqual(test_conformance.N_CHECKS, len(rows),
                         test_conformance._summary(rows))
        for row in rows:
            self.assertEqual(runner.PASS, row.result, '%s %s: %s%s' % (
                row.rule, row.check, row.message,
                test_conformance._summary(rows)))
        self.assertTrue(runner.passed(rows))
        self.assertEqual([], target.probe.clients,
                         'the probe left live clients')
        self.assertEqual(set(), self.images() - before,
                         'the kit left images behind')

    def test_driver_that_does_not_fence_fails_r7(self):
        rows = self.results(self.run_kit(self.target(NonFencingRBDDriver),
                                         rules=['R7']))
        for check, how in (('force_detach_by_connector', 'by connector'),
                           ('force_detach_by_attachment_id',
                            'by attachment id')):
            row = rows[('R7', check)]
            self.assertEqual(runner.FAIL, row.result)
            self.assertEqual('R7 detached host loses access (%s): the probe '
                             'says conformance-host1 still has access' % how,
                             row.message)

    def test_driver_without_grant_fence_fails_r8(self):
        rows = self.results(self.run_kit(self.target(NoGrantFenceRBDDriver),
                                         rules=['R8']))
        self.assertEqual(2, len(rows))
        self.assert_second_writer(rows)
