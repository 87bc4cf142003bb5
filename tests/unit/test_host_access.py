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

"""Host keys and public connectors."""

import testtools

from cinder_forcedetach import host_access


class ConnectorKeysTestCase(testtools.TestCase):

    def test_every_identity_of_a_host(self):
        keys = host_access.connector_keys({
            'host': 'compute1', 'ip': '10.0.0.5',
            'initiator': 'iqn.2026-11.org.example:c1',
            'wwpns': ['21:00:00:24:FF:00:00:01', 'not-a-wwpn']})
        self.assertEqual({'iqn:iqn.2026-11.org.example:c1',
                          'wwpn:21000024ff000001', 'ip:10.0.0.5'}, keys)

    def test_host_given_as_an_address_counts(self):
        self.assertEqual({'ip:10.0.0.6'},
                         host_access.connector_keys({'host': '10.0.0.6'}))

    def test_no_connector_no_keys(self):
        for value in (None, 'junk', {}, {'wwpns': 'abc'}):
            self.assertEqual(frozenset(), host_access.connector_keys(value))

    def test_holder_reaches(self):
        holder = host_access.Holder('acl', frozenset({'iqn:a'}), 'a', None)
        everyone = host_access.Holder('address-acl',
                                      frozenset({host_access.ANY_HOST}), 'ALL',
                                      None)
        self.assertTrue(host_access.holder_reaches(holder, {'iqn:a', 'ip:x'}))
        self.assertFalse(host_access.holder_reaches(holder, {'iqn:b'}))
        self.assertTrue(host_access.holder_reaches(everyone, frozenset()))

    def test_public_connector_drops_unknown_fields(self):
        self.assertEqual(
            {'host': 'h', 'initiator': 'iqn.x'},
            host_access.public_connector({'host': 'h', 'initiator': 'iqn.x',
                                          'auth_password': 'secret',
                                          'keyring': 'AQ=='}))
        self.assertIsNone(host_access.public_connector('junk'))
