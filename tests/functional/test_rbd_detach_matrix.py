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

"""Every way Cinder's os-force_detach reaches the RBD driver, live clients.

Rows: {one attachment, two on one host, two on two hosts} x {connector and
attachment id, attachment id alone, neither} x {admin, service}, through
the real API on the real single-node Ceph of :mod:`.test_rbd`, a live
librbd writer per attachment at its host's own loopback address.  After
each call the database and the cluster agree: the writer of every host
with a live attachment goes on writing and is not blocklisted; every other
writer is fenced (its next write fails with errno 108) and blocklisted; a
volume with no live attachment takes a new client at once.  Where Cinder
names no host (no connector) on a volume with several live attachments,
the driver cannot know which one leaves: the call fails (500) with nothing
changed.  Without a service token Cinder itself refuses (409) to end one
of several attachments.
"""

import time

import ddt

from cinder.tests.functional.api import client

from tests.functional import test_rbd

LAYOUTS = {
    'single': ['compute1'],
    'same_host': ['compute1', 'compute1'],
    'two_hosts': ['compute1', 'compute2'],
}
CASES = [(layout, request, service)
         for layout in LAYOUTS
         for request in ('connector', 'attachment', 'neither')
         for service in (False, True)]


@ddt.ddt
class RBDDetachMatrixTestCase(test_rbd.RBDTestCase):

    def setUp(self):
        super(RBDDetachMatrixTestCase, self).setUp()
        if not self.cluster.shim:
            self.fail('the bind shim (gcc) is needed to give each host '
                      'its own address')

    def setup_layout(self, layout):
        hosts = LAYOUTS[layout]
        extra = ({'volume_type': self.multiattach_type()}
                 if len(hosts) > 1 else {})
        vol_id = self.create_volume(**extra)['id']
        attached = []
        for n, host in enumerate(hosts):
            att, info = self.attach(vol_id, host)
            writer = self.writer(info, host, tag='W%d' % n, base=n * 10000)
            attached.append((att['id'], host, writer))
        return vol_id, attached

    def assert_agree(self, vol_id, attached):
        """The database and the cluster tell the same story."""
        live = {a['attachment_id'] for a in
                self.api.get_volume(vol_id)['attachments']}
        live_hosts = {host for att_id, host, _w in attached if att_id in live}
        blocklist = self.cluster.blocklist()
        for att_id, host, writer in attached:
            if host in live_hosts:
                writer.wait_oks(3)
                self.assertEqual([], writer.errs(), '%s of live %s cannot '
                                 'write' % (att_id, host))
                self.assertNotIn(writer.addr, blocklist)
            else:
                _seq, err_no, name, _t = writer.wait_fenced()
                self.assertEqual(('108', 'ConnectionShutdown'),
                                 (err_no, name), '%s of detached %s' % (
                                     att_id, host))
                self.assertIn(writer.addr, blocklist)
        if not live:
            self.assertEqual('available',
                             self.api.get_volume(vol_id)['status'])
            self.assertLess(self.new_client_writes(vol_id), 5.0)
        return live

    @ddt.data(*CASES)
    @ddt.unpack
    def test_os_force_detach(self, layout, request, service):
        vol_id, attached = self.setup_layout(layout)
        leaving_id, leaving_host, _writer = attached[0]
        connector = (test_rbd.connector_for(leaving_host)
                     if request == 'connector' else None)
        attachment_id = leaving_id if request != 'neither' else None
        # Cinder's bug 2004555 guard: only a service may end one of
        # several attachments (409 before any driver call).
        refused_status = (409 if len(attached) > 1 and not service else
                          500 if len(attached) > 1 and connector is None
                          else None)
        if refused_status:
            err = self.assertRaises(
                client.OpenStackApiException, self.force_detach_api, vol_id,
                connector, attachment_id, service=service)
            self.assertEqual(refused_status, err.response.status_code)
        else:
            self.force_detach_api(vol_id, connector, attachment_id,
                                  service=service)
        self.wait_volume(vol_id, ('available', 'in-use'))
        time.sleep(0.2)     # any fence has returned with the API call
        live = self.assert_agree(vol_id, attached)
        expected = {a for a, _h, _w in attached}
        if not refused_status:
            expected.discard(leaving_id)
        self.assertEqual(expected, live)
