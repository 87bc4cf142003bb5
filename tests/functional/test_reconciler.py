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

"""The reconciler of the volume service cuts what a reset left, unasked.

Real Cinder services (in-process) start our tgt driver; Cinder's own
``set_initialized`` starts its reconciler (here every 2 s, grace 60 s).  A
live qemu-io initiator holds the volume; an operator resets its state
through the API and nobody attaches again.  Within one interval the
reconciler finds the export Cinder forgot (its attachment of that host
ended and the access did not: a reset) and cuts it: the session and the
ACL entry go, a new login is refused, nothing the host writes afterwards
lands on the backing file.  The counts reach Cinder's pool capabilities.
A leak with no trace in Cinder's rows waits for the grace; a volume whose
live attachment explains its holder is never touched.

Failed on main at 4917ab2 (no reconciler: the export stayed).
"""

import time

from cinder_forcedetach.conformance import initiator as qemu_io
from cinder_forcedetach import reconciler
from tests.functional import base
from tests.support import cutoff

BLOCK = 4096
INTERVAL = 2
GRACE = 60


class ReconcilerTestCase(base.CinderTgtTestCase):

    def _get_flags(self):
        f = super(ReconcilerTestCase, self)._get_flags()
        f['forcedetach_reconcile_interval'] = {'v': INTERVAL,
                                               'g': base.BACKEND}
        f['forcedetach_reconcile_grace_seconds'] = {'v': GRACE,
                                                    'g': base.BACKEND}
        return f

    def setUp(self):
        super(ReconcilerTestCase, self).setUp()
        self.assertIsNotNone(self.driver.reconciler,
                             'Cinder started no reconciler')
        self.addCleanup(self.driver.reconciler.stop)

    def wait_passes(self, count, timeout=30):
        """Until the reconciler has run *count* more passes."""
        target = self.driver.reconciler.passes + count
        deadline = time.monotonic() + timeout
        while self.driver.reconciler.passes < target:
            if time.monotonic() > deadline:
                self.fail('the reconciler ran no pass in %d s' % timeout)
            time.sleep(0.2)
        return self.driver.reconciler.last

    def test_reset_state_leak_is_cut_within_one_interval(self):
        vol = self.create_volume()['id']
        _att, info = self.attach(vol, 'compute1')
        session = self.login(info, 'compute1')
        self.reset_status(vol, status='available', attach_status='detached')
        # control: the host writes after the reset, before any pass
        self.control_write(session, 0x11, offset=BLOCK)
        passes_at_reset = self.driver.reconciler.passes

        # The first pass that starts after the reset cuts it (one may be
        # under way already): long before the grace, which the volume
        # has not reached.
        self.wait_passes(2)
        self.assertIsNone(self.target_state(vol),
                          'the leaked export is still there')
        self.assertGreaterEqual(self.driver.reconciler.cut_total, 1)
        self.assertLessEqual(self.driver.reconciler.passes,
                             passes_at_reset + 2)

        self.assert_cut_off(session, 0xa7, offset=2 * BLOCK)
        session.close()
        again = qemu_io.QemuIoInitiator(
            info['target_portal'], info['target_iqn'],
            base.initiator_name('compute1'), info.get('auth_username'),
            info.get('auth_password'), lun=info['target_lun'])
        self.initiators.append(again)
        self.assertIsNone(again.opened, 'the cut host logged in again')
        cutoff.assert_refused(self, again.try_write(0xa7, 2 * BLOCK,
                                                    timeout=3),
                              'a new login of the cut host')
        self.assertNotIn(b'\xa7', self.backing_block(vol, 2 * BLOCK))
        self.assertEqual(b'\x11' * BLOCK, self.backing_block(vol, BLOCK))

        last = self.wait_passes(1)
        self.assertEqual({}, last['findings'])
        caps = self.driver.get_volume_stats(refresh=True)
        self.assertGreaterEqual(caps['forcedetach_reconcile_cut_total'], 1)
        self.assertEqual(('available', []), (
            self.db_volume(vol).status,
            [a.id for a in self.db_volume(vol).volume_attachment]))

    def test_leak_without_trace_waits_for_the_grace(self):
        """An ACL Cinder never granted: cut once the grace has passed."""
        self.driver.reconciler.stop()
        self.driver.reconciler.grace = 3
        vol = self.create_volume()['id']
        volume = self.db_volume(vol)
        # The export as something other than Cinder left it: no
        # attachment row ever named this host.
        self.driver.exports.create(volume, self.driver.local_path(volume))
        name = self.driver.target_name(volume)
        self.driver.target.grant(name, base.initiator_name('stray'))
        self.api.put_volume(vol, {'volume': {'description': 'touched'}})

        last = self.driver.reconciler.run_once()
        self.assertEqual((1, 0), (last['waiting'], last['cut']), last)
        self.assertEqual([base.initiator_name('stray')],
                         self.target_state(vol).acls)
        # What the pools report while it runs (stopped here: no timing).
        self.assertEqual({'leaked_export': 1},
                         self.driver.reconciler.capabilities()[
                             'forcedetach_reconcile_findings_by_case'])
        time.sleep(3)
        last = self.driver.reconciler.run_once()
        self.assertEqual((0, 1), (last['waiting'], last['cut']), last)
        self.assertIsNone(self.target_state(vol))

    def test_attach_after_the_read_is_not_cut(self):
        """The finding is checked again under the volume's lock.

        The reconciler read the volume available and detached; an attach
        begins before it cuts: the cut changes nothing, the new host keeps
        its access, Cinder's rows stay.
        """
        rec = self.driver.reconciler
        rec.stop()
        vol = self.create_volume()['id']
        _att, info = self.attach(vol, 'compute1')
        self.login(info, 'compute1')
        self.reset_status(vol, status='available', attach_status='detached')
        report = reconciler.scan.run(
            self.ctxt, {rec.backend: self.driver},
            base.CONF.volume_name_template,
            reconciler.sources.backend_resolver(None, [rec.backend]))
        cut, _waiting = rec.select(self.ctxt, report.findings,
                                   reconciler.timeutils.utcnow())
        self.assertEqual([vol], [f.volume_id for f, _why in cut])

        att2, info2 = self.attach(vol, 'compute2')
        second = self.login(info2, 'compute2')
        result = rec.cut(self.ctxt, cut[0][0])

        self.assertTrue(result.startswith('changed: '), result)
        self.assertTrue(second.write(0x44, offset=BLOCK))
        self.assertEqual([base.initiator_name('compute2')],
                         self.target_state(vol).acls)
        self.assertEqual([att2['id']], [
            a.id for a in self.db_volume(vol).volume_attachment])

    def test_live_attachment_is_never_touched(self):
        vol = self.create_volume()['id']
        _att, info = self.attach(vol, 'compute1')
        session = self.login(info, 'compute1')
        self.wait_passes(2)
        self.assertTrue(session.write(0x33, offset=BLOCK))
        self.assertEqual([base.initiator_name('compute1')],
                         self.target_state(vol).acls)
        self.assertEqual(0, self.driver.reconciler.cut_total)

    def test_backend_down_is_reported_not_cut(self):
        vol = self.create_volume()['id']
        _att, info = self.attach(vol, 'compute1')
        self.login(info, 'compute1')
        self.reset_status(vol, status='available', attach_status='detached')
        self.driver.reconciler.stop()
        self.tgtd.kill()
        last = self.driver.reconciler.run_once()
        self.assertEqual(0, last['cut'])
        self.assertEqual(1, len(last['unreachable']), last)
        self.assertEqual('available', self.db_volume(vol).status)


class ReconcilerOptionsTestCase(base.CinderTgtTestCase):
    """Interval 0: no timer, no counts (the test harness's default)."""

    def test_off(self):
        self.assertIsNotNone(self.driver.reconciler)
        self.assertFalse(self.driver.reconciler.running)
        self.assertNotIn('forcedetach_reconcile_passes',
                         self.driver.get_volume_stats(refresh=True))
        self.assertIn(reconciler.reconcile_opts[0],
                      self.driver.get_driver_options())
