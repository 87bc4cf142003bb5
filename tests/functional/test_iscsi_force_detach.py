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

"""Force-detach on a real tgtd, with live qemu-io initiators, in real Cinder.

Everything here is real: Cinder's API, scheduler and volume services (its
in-process harness), its SQLite database and objects, tooz file locks,
tgtd on loopback, qemu-io/libiscsi sessions with per-export CHAP.  Crashes
are real too: the force-detach runs in a forked child that exits with
``os._exit`` in the middle of the backend teardown.
"""

import functools
import os

from cinder import exception as cinder_exception
from cinder import objects
import ddt

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach import exception
from cinder_forcedetach.flows import force_detach as flow
from cinder_forcedetach.targets import tgtadm
from tests.functional import base

CRASH_EXIT = base.CRASH_EXIT


@ddt.ddt
class ForceDetachTestCase(base.CinderTgtTestCase):

    def attached_volume(self, host='compute1'):
        """An in-use volume whose initiator on *host* writes through tgtd."""
        vol = self.create_volume()
        att, info = self.attach(vol['id'], host)
        session = self.login(info, host)
        self.assertEqual('in-use', self.api.get_volume(vol['id'])['status'])
        return vol['id'], att, info, session

    def assert_fenced(self, session):
        """The old initiator can neither write nor read any more.

        Its write and read get a positive refusal (a time-out fails) and
        no byte of the write reaches the volume; its control write is the
        one of its login (or a later ``control_write``).
        """
        self.assert_cut_off(session, 0xee, read=True)

    def volume_bytes(self, volume_id, length=1 << 20):
        with open(self.driver.local_path(self.db_volume(volume_id)),
                  'rb') as f:
            return f.read(length)

    # -- the core guarantee -------------------------------------------------

    def test_force_detach_fences_live_initiator_even_after_reexport(self):
        vol_id, att, _info, old = self.attached_volume('compute1')
        self.assertEqual(['compute1'], [
            s.initiator.rsplit(':', 1)[1]
            for s in self.target_state(vol_id).sessions])

        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))

        self.assertIsNone(self.target_state(vol_id))
        self.assert_detached(vol_id)
        self.assert_fenced(old)

        # The volume goes to another host; the old initiator, still
        # retrying, must not get back in with the old export's identity.
        _att2, info2 = self.attach(vol_id, 'compute2')
        self.assertNotEqual(_info_auth(_info), _info_auth(info2))
        new = self.login(info2, 'compute2')
        self.assertTrue(new.read(0x5a), 'data written before is lost')
        self.assert_cut_off(old, 0xee)
        self.assertEqual(['compute2'], [
            s.initiator.rsplit(':', 1)[1]
            for s in self.target_state(vol_id).sessions])
        self.assertNotIn(b'\xee' * 512, self.volume_bytes(vol_id))

    def test_force_detach_twice_is_a_success(self):
        vol_id, att, _info, old = self.attached_volume()
        volume = self.db_volume(vol_id)
        self.driver.force_detach(self.ctxt, volume, attachment_id=att['id'])
        self.driver.force_detach(self.ctxt, volume, attachment_id=att['id'])
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        self.assertIsNone(self.target_state(vol_id))
        self.assert_detached(vol_id)
        self.assert_fenced(old)

    def test_each_backend_step_twice(self):
        """Every hook the flow calls converges when called again."""
        vol_id, att, info, old = self.attached_volume()
        volume = self.db_volume(vol_id)
        connector = base.connector_for('compute1')
        for _ in range(2):
            self.assertFalse(self.driver.revoke_host_access(volume,
                                                            connector))
            self.driver.fence_clients(volume, [connector], [])
            self.driver.disconnect_local_host(volume, connector, [])
            self.driver.remove_export(self.ctxt, volume)
        self.assertIsNone(self.target_state(vol_id))
        for _ in range(2):
            volume.finish_detach(att['id'])
        self.assert_detached(vol_id)
        self.assert_fenced(old)

    def test_force_detach_one_host_keeps_the_other(self):
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        att_a, info_a = self.attach(vol_id, 'compute1')
        att_b, info_b = self.attach(vol_id, 'compute2')
        a = self.login(info_a, 'compute1')
        b = self.login(info_b, 'compute2')
        self.control_write(a, 0x5a)

        self.driver.force_detach(self.ctxt, self.db_volume(vol_id),
                                 connector=base.connector_for('compute1'))

        state = self.target_state(vol_id)
        self.assertEqual([base.initiator_name('compute2')], state.acls)
        self.assert_fenced(a)
        self.assertTrue(b.write(0x33, offset=8192))
        volume = self.db_volume(vol_id)
        self.assertEqual('in-use', volume.status)
        self.assertEqual([att_b['id']],
                         [x.id for x in volume.volume_attachment])

    # -- crashes -----------------------------------------------------------

    def _crash_in_child(self, volume_id, patch):
        """Run force_detach in a forked child that crashes via *patch*."""
        def run():
            patch()
            self.driver.force_detach(self.ctxt, self.db_volume(volume_id))
        base.crash_in_child(self, run)

    def _crash_after_step(self, volume_id, step):
        """force_detach in a child that dies right after *step* ran."""
        real = step.execute

        def patch():
            @functools.wraps(real)
            def crashing(*args, **kwargs):
                real(*args, **kwargs)
                os._exit(CRASH_EXIT)
            step.execute = crashing

        self._crash_in_child(volume_id, patch)

    # The teardown's target commands: unbind the ACL, drop the session,
    # delete the target, delete the CHAP account.
    @ddt.data(1, 2, 3, 4)
    def test_crash_after_nth_target_command_then_rerun(self, nth):
        vol_id, _att, _info, old = self.attached_volume()
        real = tgtadm.TgtAdm._tgtadm
        calls = []

        def patch():
            @functools.wraps(real)
            def crashing(target_self, *args, **kwargs):
                out = real(target_self, *args, **kwargs)
                if args[0] != 'show_targets':
                    calls.append(args)
                    if len(calls) == nth:
                        os._exit(CRASH_EXIT)
                return out
            tgtadm.TgtAdm._tgtadm = crashing

        self._crash_in_child(vol_id, patch)
        # The crash left the backend half torn down and Cinder untouched.
        volume = self.db_volume(vol_id)
        self.assertEqual(('in-use', 1), (volume.status,
                                         len(volume.volume_attachment)))
        self.driver.force_detach(self.ctxt, volume)
        self.assertIsNone(self.target_state(vol_id))
        self.assert_detached(vol_id)
        self.assert_fenced(old)

    @ddt.data(flow.DisconnectLocalHostTask, flow.RevokeHostAccessTask,
              flow.FenceClientsTask, flow.RemoveExportTask)
    def test_crash_after_step_then_rerun(self, step):
        vol_id, _att, _info, old = self.attached_volume()
        self._crash_after_step(vol_id, step)
        self.assertEqual('in-use', self.db_volume(vol_id).status)
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        self.assertIsNone(self.target_state(vol_id))
        self.assert_detached(vol_id)
        self.assert_fenced(old)

    @ddt.data(flow.RemoveExportTask, flow.FenceClientsTask)
    def test_restart_after_crash_never_regrants_the_detached_host(self, step):
        """kill -9 after the teardown, before the DB: Cinder restarts.

        Its start-up ``ensure_export`` of the still in-use volume must not
        give the host being detached its access back; the re-run finishes.
        """
        vol_id, _att, _info, old = self.attached_volume()
        self._crash_after_step(vol_id, step)
        self.assertEqual('in-use', self.db_volume(vol_id).status)
        # What the volume service does at start-up for an in-use volume.
        self.driver.ensure_export(self.ctxt.elevated(),
                                  self.db_volume(vol_id))
        state = self.target_state(vol_id)
        self.assertNotIn(base.initiator_name('compute1'),
                         state.acls if state else [])
        self.assert_fenced(old)
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        self.assert_detached(vol_id)
        self.assertIsNone(fd_attachments.hosts_in_teardown(
            self.db_volume(vol_id)))

    def test_start_up_re_export_reads_the_volume_again(self):
        """Cinder's start-up ensure_export with the volume it read earlier.

        Another service's force-detach ended the attachment in between:
        the stale object still lists compute1, the database does not.
        """
        vol_id, _att, _info, old = self.attached_volume()
        stale = self.db_volume(vol_id)
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        self.driver.ensure_export(self.ctxt.elevated(), stale)
        self.assertIsNone(self.target_state(vol_id))
        self.assert_fenced(old)
        # A volume still in-use is exported again to its attached hosts.
        vol2, _att2, _info2, _s = self.attached_volume('compute2')
        self.tgtd.tgtadm('--op', 'delete', '--mode', 'target', '--tid',
                         str(self.target_state(vol2).tid), '--force')
        self.driver.ensure_export(self.ctxt.elevated(), self.db_volume(vol2))
        self.assertEqual([base.initiator_name('compute2')],
                         self.target_state(vol2).acls)

    # -- failures leave the database alone -----------------------------------

    def test_tgtd_down_fails_and_leaves_db_unchanged(self):
        vol_id, att, _info, old = self.attached_volume()
        self.tgtd.kill()
        volume = self.db_volume(vol_id)
        err = self.assertRaises(exception.ForceDetachFailed,
                                self.driver.force_detach, self.ctxt, volume)
        self.assertIn('RevokeHostAccessTask', str(err))
        volume = self.db_volume(vol_id)
        self.assertEqual(('in-use', 'attached', [att['id']]),
                         (volume.status, volume.attach_status,
                          [a.id for a in volume.volume_attachment]))
        # The daemon comes back (empty); the re-run converges.
        self.tgtd.start()
        self.driver.force_detach(self.ctxt, volume)
        self.assert_detached(vol_id)

    def test_remove_export_failure_leaves_db_unchanged(self):
        vol_id, att, _info, old = self.attached_volume()
        volume = self.db_volume(vol_id)
        real = self.driver.target._ops

        class TargetBusy(object):
            def __getattr__(self, operation):
                if operation == 'delete_target':
                    return lambda *args: (
                        22, '', 'tgtadm: this target is still active')
                return getattr(real, operation)
        self.driver.target._ops = TargetBusy()
        self.addCleanup(setattr, self.driver.target, '_ops', real)

        err = self.assertRaises(exception.ForceDetachFailed,
                                self.driver.force_detach, self.ctxt, volume)
        self.assertIn('RemoveExportTask', str(err))
        self.assertEqual('in-use', self.db_volume(vol_id).status)
        # Access was already revoked: the initiator stays fenced.
        self.assert_fenced(old)

    # -- bad input ---------------------------------------------------------

    @ddt.data({'host': 'compute1'}, {'host': 'compute1', 'initiator': ''},
              ['not', 'a', 'dict'])
    def test_malformed_connector_changes_nothing(self, connector):
        vol_id, att, _info, session = self.attached_volume()
        self.assertRaises(cinder_exception.InvalidConnectorException,
                          self.driver.force_detach, self.ctxt,
                          self.db_volume(vol_id), connector=connector)
        self.assertTrue(session.write(0x44))
        self.assertEqual('in-use', self.db_volume(vol_id).status)

    def test_unknown_attachment_changes_nothing(self):
        vol_id, att, _info, session = self.attached_volume()
        self.assertRaises(cinder_exception.VolumeAttachmentNotFound,
                          self.driver.force_detach, self.ctxt,
                          self.db_volume(vol_id),
                          attachment_id='00000000-0000-0000-0000-000000000000')
        other_id, other_att, _i, _s = self.attached_volume('compute2')
        self.assertRaises(cinder_exception.InvalidVolume,
                          self.driver.force_detach, self.ctxt,
                          self.db_volume(vol_id),
                          attachment_id=other_att['id'])
        self.assertTrue(session.write(0x44))
        self.assertEqual('in-use', self.db_volume(vol_id).status)

    @ddt.data('creating', 'deleting', 'downloading', 'migrating',
              'backing-up')
    def test_wrong_state_changes_nothing(self, status):
        vol_id, att, _info, session = self.attached_volume()
        volume = self.db_volume(vol_id)
        volume.status = status
        volume.save()
        err = self.assertRaises(cinder_exception.InvalidVolume,
                                self.driver.force_detach, self.ctxt, volume)
        self.assertIn(status, str(err))
        self.assertTrue(session.write(0x44))
        self.assertIsNotNone(self.target_state(vol_id))

    # -- stuck states --------------------------------------------------------

    @ddt.data('attaching', 'detaching', 'reserved', 'error_attaching')
    def test_stuck_state_with_live_export(self, status):
        vol_id, att, _info, old = self.attached_volume()
        volume = self.db_volume(vol_id)
        volume.status = status
        volume.save()
        attachment = objects.VolumeAttachment.get_by_id(self.ctxt, att['id'])
        attachment.attach_status = (status if status != 'detaching'
                                    else 'attached')
        attachment.save()
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        self.assertIsNone(self.target_state(vol_id))
        self.assert_detached(vol_id)
        self.assert_fenced(old)

    def test_stuck_without_attachment_rows(self):
        """Cinder lost the rows; the backend still exports to a host."""
        vol_id, att, _info, old = self.attached_volume()
        objects.VolumeAttachment.get_by_id(self.ctxt, att['id']).destroy()
        volume = self.db_volume(vol_id)
        volume.status = 'detaching'
        volume.save()
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        self.assertIsNone(self.target_state(vol_id))
        self.assert_detached(vol_id)
        self.assert_fenced(old)


def _info_auth(info):
    return (info.get('auth_username'), info.get('auth_password'))
