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

"""Which attachment rows are live, whose host they are, how they are logged."""

import types

import ddt
import testtools

from cinder_forcedetach import attachments
from tests import fakes

A = fakes.CONNECTOR_A
B = fakes.CONNECTOR_B
att = fakes.attachment


@ddt.ddt
class AttachmentsTestCase(testtools.TestCase):

    @ddt.unpack
    @ddt.data(
        (A, dict(A), True),
        (A, {'host': 'other', 'initiator': 'iqn.a'}, True),
        (A, {'host': 'compute1'}, True),
        (A, {'wwpns': ['50014380186af83c']}, True),
        (A, B, False),
        (None, A, False),
        ({}, A, False),
    )
    def test_same_host(self, attachment_connector, connector, expected):
        self.assertEqual(expected, attachments.same_host(
            attachment_connector, connector))

    @ddt.data('attached', 'attaching', 'reserved', 'error_detaching',
              'error_attaching')
    def test_live(self, status):
        self.assertTrue(attachments.is_live(att('1', A, status)))

    @ddt.data('detached', 'deleted')
    def test_ended(self, status):
        self.assertFalse(attachments.is_live(att('1', A, status)))

    def test_attachments_are_logged_by_id_only(self):
        secret = dict(A, auth_password='s3cret')
        shown = repr(attachments.Attachments([att('1', secret), att('2', B)]))
        self.assertEqual('Attachments(1, 2)', shown)
        self.assertNotIn('s3cret',
                         str(attachments.Attachments([att('1', secret)])))

    @ddt.data(({}, None),
              ({attachments.TEARDOWN_MARK: '[null]'}, [None]),
              ({attachments.TEARDOWN_MARK: '[{"host": "compute1"}]'},
               [{'host': 'compute1'}]),
              ({attachments.TEARDOWN_MARK: 'not json'}, [None]),
              ({'other': 'x'}, None))
    @ddt.unpack
    def test_hosts_in_teardown(self, admin_metadata, expected):
        """A malformed record means every host: never grant on a guess."""
        volume = types.SimpleNamespace(admin_metadata=admin_metadata)
        self.assertEqual(expected, attachments.hosts_in_teardown(volume))
