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

"""No second writer on RBD, whoever reset the state (fence on grant).

What operators do, through Cinder's real API (in-process API, scheduler
and volume services loading ``cinder_forcedetach.drivers.rbd.RBDDriver``)
on the real single-node Ceph of :mod:`.test_rbd`, with live librbd clients
(:class:`tests.support.ceph.Writer` subprocesses, each bound by the
LD_PRELOAD shim to its host's own loopback address, 127.0.0.11 for
compute1, .12 for compute2, .13 for compute3): host A attached and
writing, then ``os-reset_status`` (``cinder reset-state --state available
--attach-status detached``, or Horizon's "Update Volume Status", which
sends the status alone), then host B attaches through the attachment API.

Proven, on the image itself (read back through a fresh client):

* after the reset A still writes (the reset touches only Cinder's rows);
* B's grant cuts A first: A's writes fail with errno 108
  (ConnectionShutdown, the blocklist's positive refusal, not a timeout),
  none succeeds after B's grant returned, none written from the fence on
  is in the image, every one acknowledged before is; A's address is
  blocklisted, and the cut is recorded (the driver's fence records and the
  volume's ``forcedetach_grant_fence`` admin metadata);
* B (and C on a multiattach volume after the reset) then writes and its
  blocks land;
* no false cut: on a multiattach volume a second host's attach leaves the
  first one writing, with nothing recorded.

The three cut tests failed on main at 4917ab2, before
:mod:`cinder_forcedetach.grant_fence` ("host A wrote after the other
host's grant": B's grant left A's librbd client writing, two writers taking
turns on the exclusive lock of one volume), and fail the same way with
``fence_before_grant`` returning at once; they pass with it.  The no false
cut test passes either way: it guards against the fence cutting too much.
"""

import json
import time

from cinder.db import api as db

from cinder_forcedetach import grant_fence
from tests.functional import test_rbd
from tests.support import ceph

BLOCK = ceph.BLOCK
INSTANCE_X = '11111111-1111-4111-8111-111111111111'
INSTANCE_Y = '22222222-2222-4222-8222-222222222222'


def tearDownModule():
    ceph.release_cluster()


class RBDSecondWriterTestCase(test_rbd.RBDTestCase):

    # -- helpers ------------------------------------------------------------

    def grant(self, volume_id, host, instance=None):
        """Attach as Nova does: POST /attachments with the connector.

        Returns ``(attachment, connection_info, started, granted)``: the
        times before the request and after Cinder answered (the grant,
        and any fence before it, has happened by then).
        """
        body = {'volume_uuid': volume_id,
                'connector': self.connector(host)}
        if instance:
            body['instance_uuid'] = instance
        started = time.time()
        att = self.api.api_post('/attachments',
                                {'attachment': body})['attachment']
        granted = time.time()
        self.api.api_post('/attachments/%s/action' % att['id'],
                          {'os-complete': {}}, check_response_status=[204])
        return att, att['connection_info'], started, granted

    def need_shim(self):
        if not self.cluster.shim:
            self.skipTest('needs the bind shim (gcc) to give each host its '
                          'own address')

    def assert_lands(self, volume_id, writer, n=3):
        """*writer* writes *n* more blocks; the last one is in the image."""
        writer.wait_oks(n)
        self.assertEqual([], writer.errs(), writer.lines[-8:])
        seq = max(s for s, _t in writer.oks())
        self.assertEqual(ceph.block_for(writer.tag, seq),
                         self.read_blocks(volume_id, writer.base + seq,
                                          1)[0])
        return seq

    def assert_cut_by_grant(self, volume_id, writer, started, granted):
        """*writer* was fenced by the grant that ran from started to granted.

        Its first failure comes with that grant (not before it), no write
        of it succeeds once the grant returned, its failures are errno 108
        (ConnectionShutdown), nothing it wrote from the fence on reached
        the image and everything acknowledged before did
        (``assert_fenced_cleanly``); its address is blocklisted.
        """
        writer.wait_for(
            lambda: writer.errs() or len(
                [s for s, t in writer.oks() if t > granted]) >= 3,
            10, 'a failed write, or writes after the grant')
        late = [s for s, t in writer.oks() if t > granted]
        self.assertEqual([], late, 'host %s wrote after the other host\'s '
                         'grant' % writer.tag)
        first_err = writer.wait_fenced()
        self.assertEqual(('108', 'ConnectionShutdown'), first_err[1:3],
                         writer.lines[-8:])
        self.assertGreater(first_err[3], started,
                           'cut before the grant (by the reset?)')
        self.assert_fenced_cleanly(writer, volume_id, granted)
        self.assertIn(writer.addr, self.cluster.blocklist())

    def fence_record(self, volume_id):
        meta = db.volume_admin_metadata_get(self.ctxt, volume_id)
        return json.loads(meta[grant_fence.RECORD_KEY])

    def assert_recorded(self, volume_id, granted_to, writers):
        """The fence records name exactly *writers*' clients."""
        fences = self.driver.list_fences(self.db_volume(volume_id))
        self.assertEqual(sorted(w.addr for w in writers),
                         sorted(f['addr'] for f in fences))
        self.assertTrue(all(f['active'] for f in fences), fences)
        record = self.fence_record(volume_id)
        self.assertEqual(granted_to, record['granted_to'])
        for w in writers:
            self.assertEqual(
                1, len([c for c in record['cut'] if c.endswith(w.addr)]),
                record)

    # -- the cases ----------------------------------------------------------

    def test_reset_state_then_attach_elsewhere_cuts_the_first_host(self):
        vol, _att_a, _info_a, a = self.attached_volume('compute1')
        self.reset_status(vol, status='available', attach_status='detached')
        volume = self.db_volume(vol)
        self.assertEqual(('available', 'detached', []), (
            volume.status, volume.attach_status,
            [x.id for x in volume.volume_attachment]))
        self.assert_lands(vol, a)       # control: the reset cut nothing

        _att_b, info_b, started, granted = self.grant(vol, 'compute2')

        self.assert_cut_by_grant(vol, a, started, granted)
        b = self.writer(info_b, 'compute2', tag='B', base=10000)
        self.assert_lands(vol, b)
        self.assertNotIn(b.addr, self.cluster.blocklist())
        self.assert_recorded(vol, 'compute2', [a])
        self.assertEqual(
            [ceph.HOST_IPS['compute1'] if self.cluster.shim
             else '127.0.0.1'],
            [f['ip'] for f in self.driver.list_fences(self.db_volume(vol))])

    def test_status_only_reset_then_attach_elsewhere(self):
        """Horizon's "Update Volume Status": A's attachment stays live."""
        vol = self.create_volume()['id']
        att_a, info_a, _s, _g = self.grant(vol, 'compute1',
                                           instance=INSTANCE_X)
        a = self.writer(info_a, 'compute1')
        self.reset_status(vol, status='available')
        volume = self.db_volume(vol)
        self.assertEqual(('available', [att_a['id']]), (
            volume.status, [x.id for x in volume.volume_attachment]))
        self.assert_lands(vol, a)

        _att_b, info_b, started, granted = self.grant(vol, 'compute2',
                                                      instance=INSTANCE_Y)

        self.assert_cut_by_grant(vol, a, started, granted)
        b = self.writer(info_b, 'compute2', tag='B', base=10000)
        self.assert_lands(vol, b)
        self.assert_recorded(vol, 'compute2', [a])

    def test_multiattach_reset_then_third_host_cuts_both(self):
        vol, (_att_a, a), (_att_b, b) = self.two_host_writers()
        self.reset_status(vol, status='available', attach_status='detached')
        self.assert_lands(vol, a)
        self.assert_lands(vol, b)

        _att_c, info_c, started, granted = self.grant(vol, 'compute3')

        self.assert_cut_by_grant(vol, a, started, granted)
        self.assert_cut_by_grant(vol, b, started, granted)
        c = self.writer(info_c, 'compute3', tag='C', base=20000)
        self.assert_lands(vol, c)
        self.assertNotIn(c.addr, self.cluster.blocklist())
        self.assert_recorded(vol, 'compute3', [a, b])

    def test_multiattach_second_host_keeps_the_first(self):
        """No false cut: a live attachment explains its host."""
        self.need_shim()
        vol = self.create_volume(volume_type=self.multiattach_type())['id']
        _att_a, info_a, _s, _g = self.grant(vol, 'compute1')
        a = self.writer(info_a, 'compute1')

        _att_b, info_b, _started, granted = self.grant(vol, 'compute2')
        b = self.writer(info_b, 'compute2', tag='B', base=10000)

        a.wait_oks(10)
        self.assertNotEqual([], [s for s, t in a.oks() if t > granted])
        self.assert_lands(vol, a)
        self.assert_lands(vol, b)
        blocklist = self.cluster.blocklist()
        self.assertNotIn(a.addr, blocklist)
        self.assertNotIn(b.addr, blocklist)
        self.assertEqual([], self.driver.list_fences(self.db_volume(vol)))
        meta = db.volume_admin_metadata_get(self.ctxt, vol)
        self.assertNotIn(grant_fence.RECORD_KEY, meta)
