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

from cinder_forcedetach.audit import evidence


class ConnectorKeysTestCase(testtools.TestCase):

    def test_every_identity_of_a_host(self):
        keys = evidence.connector_keys({
            'host': 'compute1', 'ip': '10.0.0.5',
            'initiator': 'iqn.2026-11.org.example:c1',
            'wwpns': ['21:00:00:24:FF:00:00:01', 'not-a-wwpn']})
        self.assertEqual({'iqn:iqn.2026-11.org.example:c1',
                          'wwpn:21000024ff000001', 'ip:10.0.0.5'}, keys)

    def test_host_given_as_an_address_counts(self):
        self.assertEqual({'ip:10.0.0.6'},
                         evidence.connector_keys({'host': '10.0.0.6'}))

    def test_no_connector_no_keys(self):
        for value in (None, 'junk', {}, {'wwpns': 'abc'}):
            self.assertEqual(frozenset(), evidence.connector_keys(value))

    def test_holder_reaches(self):
        holder = evidence.Holder('acl', frozenset({'iqn:a'}), 'a', None)
        everyone = evidence.Holder('address-acl',
                                   frozenset({evidence.ANY_HOST}), 'ALL',
                                   None)
        self.assertTrue(evidence.holder_reaches(holder, {'iqn:a', 'ip:x'}))
        self.assertFalse(evidence.holder_reaches(holder, {'iqn:b'}))
        self.assertTrue(evidence.holder_reaches(everyone, frozenset()))

    def test_public_connector_drops_unknown_fields(self):
        self.assertEqual(
            {'host': 'h', 'initiator': 'iqn.x'},
            evidence.public_connector({'host': 'h', 'initiator': 'iqn.x',
                                       'auth_password': 'secret',
                                       'keyring': 'AQ=='}))
        self.assertIsNone(evidence.public_connector('junk'))
