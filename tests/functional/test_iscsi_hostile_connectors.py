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

"""Hostile connectors through Cinder's real API, against a real tgtd.

tgtd scans a bind request for ``initiator-address=``: an initiator name
that carries it (after a ``,``, a newline or a space) would bind an address
ACL beside the name, and any initiator holding the CHAP account could then
log in.  Each name here is sent as a client would send it — attachment
create, attachment update, os-force_detach — and must get a clear error
with nothing exported, granted or revoked.
"""

from cinder import exception as cinder_exception
from cinder.tests.functional.api import client
import ddt

from cinder_forcedetach.conformance import initiator as qemu_io
from tests.functional import base
from tests.support import cutoff

INTRUDER = 'iqn.2026-11.org.cinder-forcedetach.test:intruder'

HOSTILE_INITIATORS = (
    'iqn.2026-01.org.example:a,initiator-address=ALL',
    'iqn.2026-01.org.example:c\ninitiator-address=ALL',
    'iqn.2026-01.org.example:b\nALL',
    'iqn.2026-01.org.example:d initiator-address=ALL',
    'iqn.2026-01.org.example:e\tinitiator-name=ALL',
    'iqn.2026-01.org.example:f=1',
    'ALL',
    '127.0.0.1',
    '--initiator-address=ALL',
    'iqn.2026-01.org.example:' + 'x' * 300,
    'iqn.2026-01.org.example:\u00e4',
    'iqn.2026-01.org.example:g\x00',
    '',
    42,
    ['iqn.2026-01.org.example:h'],
)

HOSTILE_FIELDS = (
    {'host': 'compute1\ninitiator-address=ALL'},
    {'host': 'compute1,initiator-address=ALL'},
    {'host': '../../etc'},
    {'ip': '127.0.0.1,ALL'},
    {'ip': 'ALL'},
    {'wwpns': ['50014380186af83c,initiator-address=ALL']},
    {'wwnns': 'not-a-wwn'},
)


def _hostile_connector(**fields):
    connector = base.connector_for('compute1')
    connector.update(fields)
    return connector


@ddt.ddt
class HostileConnectorTestCase(base.CinderTgtTestCase):

    def assert_nothing_exported(self, volume_id):
        self.assertIsNone(self.target_state(volume_id))
        self.assertEqual({}, self.driver.target.list_targets())

    def reserve(self, volume_id):
        return self.api.api_post('/attachments', {'attachment': {
            'volume_uuid': volume_id}})['attachment']

    def update(self, attachment_id, connector):
        return self.api.api_put('/attachments/%s' % attachment_id,
                                {'attachment': {'connector': connector}})

    @ddt.data(*HOSTILE_INITIATORS)
    def test_attachment_create_refuses_initiator(self, initiator):
        vol = self.create_volume()
        err = self.assertRaises(
            client.OpenStackApiException, self.api.api_post, '/attachments',
            {'attachment': {'volume_uuid': vol['id'],
                            'connector': _hostile_connector(
                                initiator=initiator)}})
        self.assertIn(str(err.response.status_code), ('400', '500'))
        self.assertIn('initiator', err.response.text)
        self.assert_nothing_exported(vol['id'])

    @ddt.data(*HOSTILE_INITIATORS)
    def test_attachment_update_refuses_initiator(self, initiator):
        vol = self.create_volume()
        att = self.reserve(vol['id'])
        err = self.assertRaises(client.OpenStackApiException400, self.update,
                                att['id'], _hostile_connector(
                                    initiator=initiator))
        self.assertIn('initiator', err.response.text)
        self.assert_nothing_exported(vol['id'])
        self.assertEqual('reserved', self.api.get_volume(vol['id'])['status'])

    @ddt.data(*HOSTILE_FIELDS)
    def test_attachment_update_refuses_field(self, fields):
        vol = self.create_volume()
        att = self.reserve(vol['id'])
        err = self.assertRaises(client.OpenStackApiException400, self.update,
                                att['id'], _hostile_connector(**fields))
        self.assertIn(list(fields)[0], err.response.text)
        self.assert_nothing_exported(vol['id'])

    def test_hostile_second_host_of_a_shared_export(self):
        """Nothing but the exact initiators of the attachments, ever.

        Host 1 is attached and writing; a second attachment's hostile
        connectors are refused, the ACL stays exactly host 1's name, and
        an unlisted initiator holding the CHAP account is refused.
        """
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        att, info = self.attach(vol_id, 'compute1')
        session = self.login(info, 'compute1')
        second = self.reserve(vol_id)
        for initiator in HOSTILE_INITIATORS[:4]:
            self.assertRaises(client.OpenStackApiException400, self.update,
                              second['id'], _hostile_connector(
                                  host='compute2', initiator=initiator))
        state = self.target_state(vol_id)
        self.assertEqual([base.initiator_name('compute1')], state.acls)
        self.assertEqual([], state.address_acls)
        intruder = self.connect_as(info, INTRUDER)
        self.assertIsNone(intruder.opened, 'the intruder logged in')
        # Never logged in, so no control write of its own: its write must
        # be refused positively (LOGIN_REFUSED) and land nowhere.
        cutoff.assert_refused(self, intruder.try_write(
            0x66, offset=8192, timeout=3), 'the intruder')
        with open(self.backing_path(vol_id), 'rb') as f:
            f.seek(8192)
            self.assertNotIn(b'\x66', f.read(4096))
        self.assertTrue(session.write(0x11, offset=8192))

    def connect_as(self, info, initiator):
        session = qemu_io.QemuIoInitiator(
            info['target_portal'], info['target_iqn'], initiator,
            info['auth_username'], info['auth_password'],
            lun=info['target_lun'])
        self.initiators.append(session)
        return session

    @ddt.data(*HOSTILE_INITIATORS[:3])
    def test_os_force_detach_refuses_initiator(self, initiator):
        """A clear error; the attached host keeps its access and its row."""
        vol = self.create_volume()
        att, info = self.attach(vol['id'], 'compute1')
        session = self.login(info, 'compute1')
        self.assertRaises(client.OpenStackApiException,
                          self.force_detach_api, vol['id'],
                          _hostile_connector(initiator=initiator),
                          att['id'])
        vol = self.api.get_volume(vol['id'])
        self.assertEqual('in-use', vol['status'])
        self.assertEqual([base.initiator_name('compute1')],
                         self.target_state(vol['id']).acls)
        self.assertTrue(session.write(0x22, offset=4096))

    def test_force_detach_flow_refuses_initiator(self):
        vol = self.create_volume()
        att, info = self.attach(vol['id'], 'compute1')
        session = self.login(info, 'compute1')
        err = self.assertRaises(
            cinder_exception.InvalidConnectorException,
            self.driver.force_detach, self.ctxt,
            self.db_volume(vol['id']),
            _hostile_connector(initiator=HOSTILE_INITIATORS[1]))
        self.assertIn('initiator', str(err))
        self.assertEqual('in-use', self.api.get_volume(vol['id'])['status'])
        self.assertTrue(session.write(0x33, offset=4096))
