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
volume with no live attachment takes a new client at once.  An attachment
id without a connector names the host that leaves through the connector
stored on that attachment (fenced once Cinder's detach has ended it);
with neither, Cinder refuses (400) with nothing changed.  Without a
service token Cinder itself refuses (409) to end one of several
attachments.
"""

import ddt

from tests.functional import detach_matrix
from tests.functional import test_rbd


@ddt.ddt
class RBDDetachMatrixTestCase(detach_matrix.DetachMatrix,
                              test_rbd.RBDTestCase):

    connector_for = staticmethod(test_rbd.connector_for)

    def setUp(self):
        super(RBDDetachMatrixTestCase, self).setUp()
        if not self.cluster.shim:
            self.fail('the bind shim (gcc) is needed to give each host '
                      'its own address')

    def live_client(self, info, host, index):
        return self.writer(info, host, tag='W%d' % index,
                           base=index * 10000)

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

    @ddt.data(*detach_matrix.CASES)
    @ddt.unpack
    def test_os_force_detach(self, layout, request, service):
        self.run_row(layout, request, service)
