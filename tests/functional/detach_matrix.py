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

"""The detach matrix both backends run: rows, and the call of each row.

Rows: {one attachment, two on one host, two on two hosts} x {connector and
attachment id, attachment id alone, neither} x {admin, service}.  A service's
os-force_detach of one attachment of two hosts names the attachment and
no connector: that host leaves, the other keeps its access.  A test
case supplies ``live_client(connection_info, host, index)`` (an initiator
or librbd client holding the volume for *host*), ``assert_agree(volume
id, [(attachment id, host, live client)])`` -> the live attachment ids,
and ``connector_for(host)``.
"""


from cinder.tests.functional.api import client

from cinder_forcedetach import host_access
from tests.support import waiting

LAYOUTS = {
    'single': ['compute1'],
    'same_host': ['compute1', 'compute1'],
    'two_hosts': ['compute1', 'compute2'],
}
CASES = [(layout, request, service)
         for layout in LAYOUTS
         for request in ('connector', 'attachment', 'neither')
         for service in (False, True)]


def refused_status(attached, connector, attachment_id, service):
    """What Cinder answers a row that must change nothing.

    Cinder's bug 2004555 guard: only a service may end one of several
    attachments (409 before any driver call).  With neither a connector
    nor an attachment id on several live attachments nothing names a host:
    Cinder's detach refuses (400) and the driver revoked nothing.
    """
    if len(attached) > 1 and not service:
        return 409
    if len(attached) > 1 and connector is None and attachment_id is None:
        return 400
    return None


def revoked_after_detach(attached, connector, refused):
    """Whether the leaving host is revoked once Cinder's detach ended it.

    Without a connector Cinder names the attachment only to its own
    detach; the driver revokes that host right after (the mixin's
    ``_revoke_after_detach``), unless the host keeps another attachment.
    """
    hosts = {host for _a, host, _c in attached}
    return (not refused and connector is None and len(attached) > 1 and
            len(hosts) > 1)


class DetachMatrix(object):
    """``run_row``: one os-force_detach through the API, then agreement."""

    def wait_host_revoked(self, vol_id, host, timeout=10):
        """Until the driver's holders of the volume no longer show *host*."""
        keys = host_access.connector_keys(self.connector_for(host))
        waiting.wait_for(
            lambda: not any(h.keys & keys for h in self.driver.volume_holders(
                self.db_volume(vol_id))), timeout,
            '%s to hold volume %s no more after the detach' % (host, vol_id),
            interval=0.1)

    def setup_layout(self, layout):
        """A volume attached as *layout* says, a live client per host."""
        hosts = LAYOUTS[layout]
        extra = ({'volume_type': self.multiattach_type()}
                 if len(hosts) > 1 else {})
        vol_id = self.create_volume(**extra)['id']
        attached = []
        for index, host in enumerate(hosts):
            att, info = self.attach(vol_id, host)
            attached.append((att['id'], host,
                             self.live_client(info, host, index)))
        return vol_id, attached

    def run_row(self, layout, request, service):
        vol_id, attached = self.setup_layout(layout)
        leaving_id, leaving_host, _client = attached[0]
        connector = (self.connector_for(leaving_host)
                     if request == 'connector' else None)
        attachment_id = leaving_id if request != 'neither' else None
        refused = refused_status(attached, connector, attachment_id, service)
        if refused:
            err = self.assertRaises(
                client.OpenStackApiException, self.force_detach_api, vol_id,
                connector, attachment_id, service=service)
            self.assertEqual(refused, err.response.status_code)
        else:
            self.force_detach_api(vol_id, connector, attachment_id,
                                  service=service)
        self.wait_volume(vol_id, ('available', 'in-use'))
        if revoked_after_detach(attached, connector, refused):
            self.wait_host_revoked(vol_id, leaving_host)
        live = self.assert_agree(vol_id, attached)
        expected = {a for a, _h, _c in attached}
        if not refused:
            expected.discard(leaving_id)
        self.assertEqual(expected, live)
