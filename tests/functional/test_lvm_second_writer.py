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

"""No second writer on the LVM drop-in, whoever reset the state.

The operator path of :mod:`tests.functional.test_iscsi_second_writer` on
:class:`cinder_forcedetach.drivers.lvm.LVMVolumeDriver` with
``target_helper = tgtadm`` (its target driver is ours,
:class:`cinder_forcedetach.targets.cinder_tgt.TgtTarget`), through Cinder's
real API, scheduler and volume services (in-process, Cinder's functional
harness), on a real tgtd with live qemu-io (libiscsi) initiators: host A
attached and writing, ``os-reset_status`` (``cinder reset-state --state
available --attach-status detached``, or the status alone), then host B
attaches.  Proven: before B is granted, the LVM driver's grant fence reads
A's ACL entry and session on the volume's tgt target and cuts them; A's
write after B's grant fails and never reaches the volume's backing file, A
cannot log in again with the same CHAP account, B writes and its data
lands; the cut is recorded in the volume's admin metadata.

No LVM: these kernels have no device-mapper, so no LV can exist.  The
volume service loads :class:`FileBackedLVMDriver`, a TEST-ONLY subclass of
our drop-in defined here: its volume group is Cinder's own
``cinder.tests.unit.brick.fake_lvm.FakeBrickLVM`` (upstream's LVM code runs
against it: ``create_volume``, ``delete_volume``, stats), and in place of
each LV it keeps a sparse file, whose path it gives the target where
upstream gives ``/dev/<volume_group>/<volume name>`` (as
:mod:`tests.functional.test_lvm_target` does).  Everything from the
driver's ``initialize_connection`` down is the product's: the mixin's
locked grant and its fence, the drop-in's ``volume_holders`` and
``revoke_host_access``, ``TgtTarget`` and ``tgtadm`` on a real tgtd.

This is the in-process API route, not a direct call of the driver: the
only harness change is ``scheduler_driver_init_wait_time`` (see
``_get_flags``).

Failed on main at 4917ab2, before fence on grant (run on an export of
that commit, with ``grant_fence.py`` and ``test_iscsi_second_writer.py``
present only so that this module imports; nothing there calls the
fence): B's grant left A's ACL entry and session, and A's write after
B's attach landed in the backing file.  Every test here also fails with
``return []`` as the first line of
:func:`cinder_forcedetach.grant_fence.fence_before_grant`.  Passes with
:mod:`cinder_forcedetach.grant_fence`.
"""

import os
import time

from cinder.db import api as db
from cinder.tests.unit.brick import fake_lvm
from cinder.volume.drivers import lvm as upstream_lvm
from oslo_utils import units

# Imported before flags are set, so that its options are registered.
from cinder_forcedetach.drivers import lvm
from cinder_forcedetach.targets import cinder_tgt
from tests.functional import base
from tests.functional import test_iscsi_second_writer

DRIVER = __name__ + '.FileBackedLVMDriver'
BLOCK = test_iscsi_second_writer.BLOCK
INSTANCE_X = '11111111-1111-4111-8111-111111111111'
INSTANCE_Y = '22222222-2222-4222-8222-222222222222'


class FileBackedLVMDriver(lvm.LVMVolumeDriver):
    """TEST ONLY: our LVM drop-in with a fake VG and files for LVs.

    The volume group is ``FakeBrickLVM`` (no ``vgs``/``lvcreate`` runs);
    each "LV" is a sparse file in ``forcedetach_volumes_dir``, created and
    removed after upstream's ``create_volume``/``delete_volume`` ran on the
    fake VG.  Overridden for that alone: ``check_for_setup_error`` (upstream
    lists the VGs with LVM tools), ``local_path``, and ``create_export`` /
    ``ensure_export``, which hand our ``TgtTarget`` the file's path where
    upstream hands it ``/dev/<volume_group>/<name>``.  The grant
    (``initialize_connection``, the mixin's locked wrapper and its fence),
    ``volume_holders``, ``revoke_host_access`` and the target are the
    product's, unchanged.
    """

    def __init__(self, *args, **kwargs):
        super(FileBackedLVMDriver, self).__init__(*args, **kwargs)
        if self.vg is None:
            self.vg = fake_lvm.FakeBrickLVM(
                self.configuration.volume_group, False, None, 'default')
            # FakeBrickLVM's sizes are strings ('5.00'); a real VG's are
            # numbers, which the scheduler's capacity filter computes with.
            self.vg.vg_size = self.vg.vg_free_space = 100.0

    @property
    def lv_dir(self):
        return self.configuration.safe_get('forcedetach_volumes_dir')

    def check_for_setup_error(self):
        """Upstream's asks LVM for the VG; here the files' directory."""
        if not os.path.isdir(self.lv_dir):
            raise RuntimeError('no directory %s for the stand-in LVs' %
                               self.lv_dir)

    def local_path(self, volume, vg=None):
        return os.path.join(self.lv_dir, volume['name'])

    def create_volume(self, volume):
        super(FileBackedLVMDriver, self).create_volume(volume)
        with open(self.local_path(volume), 'wb') as f:
            f.truncate(volume['size'] * units.Gi)

    def delete_volume(self, volume):
        super(FileBackedLVMDriver, self).delete_volume(volume)
        try:
            os.unlink(self.local_path(volume))
        except FileNotFoundError:
            pass

    # Upstream exports /dev/<volume_group>/<name>, which cannot exist here.
    def create_export(self, context, volume, connector, vg=None):
        self.vg.activate_lv(volume['name'])
        export = self.target_driver.create_export(context, volume,
                                                  self.local_path(volume))
        return {'provider_location': export['location'],
                'provider_auth': export['auth']}

    def ensure_export(self, context, volume):
        self.vg.activate_lv(volume['name'])
        return self.target_driver.ensure_export(context, volume,
                                                self.local_path(volume))


class LVMSecondWriterTestCase(base.CinderTgtTestCase):
    """Cinder's services loading :class:`FileBackedLVMDriver` on tgtd."""

    _vol_type_name = 'forcedetach-lvm'

    # The tgt test's helpers, as they are (not its tests: they are the
    # tgt driver's).  They reach the target through target_state() and the
    # volume's file through the driver's local_path().  (No module-level
    # name for that class: the test loader would run its tests here too.)
    _tgt = test_iscsi_second_writer.TgtSecondWriterTestCase
    reset_status = _tgt.reset_status
    backing_block = _tgt.backing_block
    attach_writing = _tgt.attach_writing
    assert_cut = _tgt.assert_cut
    fence_record = _tgt.fence_record
    del _tgt

    def _get_flags(self):
        f = super(LVMSecondWriterTestCase, self)._get_flags()
        f['volume_driver'] = {'v': DRIVER, 'g': base.BACKEND}
        f['target_helper'] = {'v': 'tgtadm', 'g': base.BACKEND}
        f['volume_group'] = {'v': 'cinder-volumes', 'g': base.BACKEND}
        f['lvm_type'] = {'v': 'default', 'g': base.BACKEND}
        # Upstream's delete would dd zeros over the whole "LV".
        f['volume_clear'] = {'v': 'none', 'g': base.BACKEND}
        # The scheduler's start waits (default 60 s) for two equal stats
        # reports from a driver that reports pools, as upstream LVM does;
        # the volume service's second one is a minute away.  setUp waits
        # for the first instead.
        f['scheduler_driver_init_wait_time'] = {'v': 1}
        return f

    def setUp(self):
        super(LVMSecondWriterTestCase, self).setUp()
        # The volume service runs the drop-in, on our tgt target.
        self.assertIsInstance(self.driver, FileBackedLVMDriver)
        self.assertIsInstance(self.driver, upstream_lvm.LVMVolumeDriver)
        self.assertIsInstance(self.driver.target_driver,
                              cinder_tgt.TgtTarget)
        states = self.scheduler.manager.driver.host_manager.service_states
        deadline = time.monotonic() + 10
        while not any(s.get('pools') for s in states.values()):
            self.assertLess(time.monotonic(), deadline,
                            'the scheduler got no stats from the LVM driver')
            time.sleep(0.05)

    def target_state(self, volume_id):
        exports = self.driver.target_driver.exports
        return exports.target.find(exports.target_name(
            self.db_volume(volume_id)))

    def assert_granted_alone(self, volume_id, session, host, byte, offset):
        """*host* is the only one the target admits; its write lands."""
        name = base.initiator_name(host)
        state = self.target_state(volume_id)
        self.assertEqual([name], state.acls)
        self.assertEqual([name], [s.initiator for s in state.sessions])
        self.assertTrue(session.write(byte, offset=offset))
        self.assertEqual(bytes([byte]) * BLOCK,
                         self.backing_block(volume_id, offset))

    # -- the cases -----------------------------------------------------------

    def test_reset_state_then_attach_elsewhere_cuts_the_first_host(self):
        vol = self.create_volume()['id']
        att_a, a = self.attach_writing(vol, 'compute1')
        # tgtd serves the stand-in LV's file (the LV's path upstream).
        self.assertIn('Backing store path: %s\n' % self.driver.local_path(
            self.db_volume(vol)), self.tgtd.tgtadm(
                '--op', 'show', '--mode', 'target').stdout)
        self.reset_status(vol, status='available', attach_status='detached')
        # control: A writes after the reset, right before B's attach
        self.control_write(a, 0x11, offset=BLOCK)
        self.assertEqual(b'\x11' * BLOCK, self.backing_block(vol, BLOCK))
        self.assertEqual([base.initiator_name('compute1')],
                         self.target_state(vol).acls)

        _att_b, b = self.attach_writing(vol, 'compute2')

        self.assert_cut(vol, a, 'compute1', att_a['connection_info'],
                        2 * BLOCK)
        self.assert_granted_alone(vol, b, 'compute2', 0x22, 3 * BLOCK)
        self.assertTrue(b.read(0x11, offset=BLOCK), 'B reads what A wrote')
        record = self.fence_record(vol)
        self.assertEqual('compute2', record['granted_to'])
        self.assertEqual(
            ['acl %s' % base.initiator_name('compute1'),
             'session %s' % base.initiator_name('compute1')],
            record['cut'])

    def test_status_only_reset_then_attach_elsewhere(self):
        """Horizon's "Update Volume Status": A's attachment stays live."""
        vol = self.create_volume()['id']
        att_a, a = self.attach_writing(vol, 'compute1', instance=INSTANCE_X)
        self.reset_status(vol, status='available')
        self.assertEqual('attached', db.volume_attachment_get(
            self.ctxt, att_a['id']).attach_status)
        self.control_write(a, 0x11, offset=BLOCK)

        _att_b, b = self.attach_writing(vol, 'compute2', instance=INSTANCE_Y)

        self.assert_cut(vol, a, 'compute1', att_a['connection_info'],
                        2 * BLOCK)
        self.assert_granted_alone(vol, b, 'compute2', 0x22, 3 * BLOCK)
