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

"""Every way Cinder's os-force_detach reaches the driver, with live hosts.

Rows: {one attachment, two on one host, two on two hosts} x {connector and
attachment id, attachment id alone, neither} x {admin, service}, through
the real API on a real tgtd, a live qemu-io initiator per attachment.
After each call the database and the backend agree: every host with a live
attachment can write, every other host cannot, and a volume with no live
attachment has no target.  An attachment id without a connector names
the host that leaves through the connector stored on that attachment
(revoked once Cinder's detach has ended it); with neither, Cinder refuses
(400) with nothing changed.  Without a service token Cinder itself
refuses (409) to end one of several attachments.
"""

import ddt

from tests.functional import base
from tests.functional import detach_matrix


@ddt.ddt
class DetachMatrixTestCase(detach_matrix.DetachMatrix,
                           base.CinderTgtTestCase):

    connector_for = staticmethod(base.connector_for)

    def live_client(self, info, host, index):
        return self.login(info, host)

    def force_detach_api(self, *args, **kwargs):
        """os-force_detach, right after each live client's control write.

        Client *i* writes 0x20+i at block *i*: where :meth:`assert_agree`
        then writes 0x40+i.
        """
        for index, session in enumerate(self.initiators):
            self.control_write(session, 0x20 + index, offset=index * 4096)
        return super(DetachMatrixTestCase, self).force_detach_api(
            *args, **kwargs)

    def assert_agree(self, vol_id, attached):
        """The database and the backend tell the same story.

        Access belongs to a host, not to an attachment: a host with a live
        attachment can write, every other host cannot.
        """
        live = {a['attachment_id'] for a in
                self.api.get_volume(vol_id)['attachments']}
        live_hosts = {host for att_id, host, _s in attached if att_id in live}
        state = self.target_state(vol_id)
        if not live:
            self.assertIsNone(state)
        for offset, (att_id, host, session) in enumerate(attached):
            if host in live_hosts:
                wrote = session.try_write(0x40 + offset,
                                          offset=offset * 4096, timeout=3)
                self.assertEqual('WROTE', wrote.kind, '%s of live %s cannot '
                                 'write: %s' % (att_id, host, wrote))
                self.assertIn(base.initiator_name(host), state.acls)
            else:
                # A positive refusal, and nothing of it on the volume.
                self.assert_cut_off(session, 0x40 + offset,
                                    offset=offset * 4096)
        return live

    @ddt.data(*detach_matrix.CASES)
    @ddt.unpack
    def test_os_force_detach(self, layout, request, service):
        self.run_row(layout, request, service)
