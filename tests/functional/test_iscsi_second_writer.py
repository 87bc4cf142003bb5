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

"""No second writer on tgt, whoever reset the state (fence on grant).

What operators do, through Cinder's real API on a real tgtd, with live
qemu-io (libiscsi) initiators: host A attached and writing, then
``os-reset_status`` (``cinder reset-state``, or Horizon's "Update Volume
Status", which sends the status alone), then host B attaches.  Before B is
granted, A's ACL entry and session go: A's next write does not land, A
cannot log in again, B writes.  Proved on the volume's backing file: what
A writes after B's grant never reaches it.

Failed on main at 4917ab2 (the grant left A's ACL and session: A wrote
after B's attach); passes with :mod:`cinder_forcedetach.grant_fence`.
"""

import json

from cinder.db import api as db
from cinder.tests.functional.api import client

from cinder_forcedetach.conformance import initiator as qemu_io
from cinder_forcedetach import grant_fence
from tests.functional import base
from tests.support import cutoff

BLOCK = 4096


class TgtSecondWriterTestCase(base.CinderTgtTestCase):

    def attach_writing(self, volume_id, host, instance=None):
        """Attach as Nova does; a live initiator that has just written."""
        att, info = self.attach(volume_id, host, instance=instance)
        return att, self.login(info, host)

    def assert_cut(self, volume_id, session, host, info, offset):
        """*host* no longer reaches the volume: positive signs, and data.

        Its ACL entry and session are gone from tgtd, the write it tries
        after the grant is refused (positively: a time-out fails) and
        never reaches the backing file, nor its session's control write
        of right before the grant is lost; a new login with the same
        credentials is refused (the old qemu-io is killed first, so a
        retried write cannot land later).
        """
        state = self.target_state(volume_id)
        name = base.initiator_name(host)
        self.assertNotIn(name, state.acls)
        self.assertNotIn(name, [s.initiator for s in state.sessions])
        self.assert_cut_off(session, 0xa7, offset=offset,
                            volume_id=volume_id)
        session.close()
        again = qemu_io.QemuIoInitiator(
            info['target_portal'], info['target_iqn'], name,
            info.get('auth_username'), info.get('auth_password'),
            lun=info['target_lun'])
        self.initiators.append(again)
        self.assertIsNone(again.opened, 'the cut host logged in again')
        cutoff.assert_refused(self, again.try_write(0xa7, offset, timeout=3),
                              'a new login of the cut host')
        self.assertNotIn(b'\xa7', self.backing_block(volume_id, offset))

    def fence_record(self, volume_id):
        meta = db.volume_admin_metadata_get(self.ctxt, volume_id)
        return json.loads(meta[grant_fence.RECORD_KEY])

    # -- the cases -----------------------------------------------------------

    def test_reset_state_then_attach_elsewhere_cuts_the_first_host(self):
        vol = self.create_volume()['id']
        att_a, a = self.attach_writing(vol, 'compute1')
        self.reset_status(vol, status='available', attach_status='detached')
        # control: A writes after the reset, right before B's attach
        self.control_write(a, 0x11, offset=BLOCK)
        self.assertEqual(b'\x11' * BLOCK, self.backing_block(vol, BLOCK))

        att_b, b = self.attach_writing(vol, 'compute2')

        self.assert_cut(vol, a, 'compute1', att_a['connection_info'],
                        2 * BLOCK)
        self.assertTrue(b.write(0x22, offset=3 * BLOCK))
        self.assertEqual(b'\x22' * BLOCK, self.backing_block(vol, 3 * BLOCK))
        state = self.target_state(vol)
        self.assertEqual([base.initiator_name('compute2')], state.acls)
        record = self.fence_record(vol)
        self.assertEqual('compute2', record['granted_to'])
        self.assertIn('session %s' % base.initiator_name('compute1'),
                      record['cut'])

    def test_status_only_reset_then_attach_elsewhere(self):
        """Horizon's "Update Volume Status": A's attachment stays live."""
        vol = self.create_volume()['id']
        att_a, a = self.attach_writing(vol, 'compute1', instance=(
            '11111111-1111-4111-8111-111111111111'))
        self.reset_status(vol, status='available')
        self.control_write(a, 0x11, offset=BLOCK)

        _att_b, b = self.attach_writing(vol, 'compute2', instance=(
            '22222222-2222-4222-8222-222222222222'))

        self.assert_cut(vol, a, 'compute1', att_a['connection_info'],
                        2 * BLOCK)
        self.assertTrue(b.write(0x22, offset=3 * BLOCK))

    def test_multiattach_reset_then_third_host_cuts_both(self):
        vol = self.create_volume(volume_type=self.multiattach_type())['id']
        att_a, a = self.attach_writing(vol, 'compute1')
        att_b, b = self.attach_writing(vol, 'compute2')
        self.reset_status(vol, status='available', attach_status='detached')
        self.control_write(a, 0x11, offset=BLOCK)
        self.control_write(b, 0x12, offset=5 * BLOCK)

        _att_c, c = self.attach_writing(vol, 'compute3')

        self.assert_cut(vol, a, 'compute1', att_a['connection_info'],
                        2 * BLOCK)
        self.assert_cut(vol, b, 'compute2', att_b['connection_info'],
                        3 * BLOCK)
        self.assertTrue(c.write(0x33, offset=4 * BLOCK))

    def test_multiattach_second_host_keeps_the_first(self):
        """No false cut: a live attachment explains its host."""
        vol = self.create_volume(volume_type=self.multiattach_type())['id']
        _att_a, a = self.attach_writing(vol, 'compute1')
        _att_b, b = self.attach_writing(vol, 'compute2')
        self.assertTrue(a.write(0x11, offset=BLOCK))
        self.assertTrue(b.write(0x22, offset=2 * BLOCK))
        self.assertEqual(
            sorted(base.initiator_name(h) for h in ('compute1', 'compute2')),
            sorted(self.target_state(vol).acls))
        meta = db.volume_admin_metadata_get(self.ctxt, vol)
        self.assertNotIn(grant_fence.RECORD_KEY, meta)

    def test_backend_unreadable_fails_the_grant(self):
        """tgtd down: the attach fails and nothing is granted."""
        vol = self.create_volume()['id']
        _att_a, a = self.attach_writing(vol, 'compute1')
        self.reset_status(vol, status='available', attach_status='detached')
        a.close()
        self.tgtd.kill()
        err = self.assertRaises(client.OpenStackApiException,
                                self.attach_writing, vol, 'compute2')
        self.assertEqual(500, err.response.status_code)
        rows = [r for r in db.volume_attachment_get_all_by_volume_id(
            self.ctxt, vol) if r.connection_info]
        self.assertEqual([], rows, 'a grant was stored')
