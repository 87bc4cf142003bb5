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

    def test_a_row_is_live_when_neither_deleted_nor_ended(self):
        live, ended = att('1', A, 'attaching'), att('2', A, 'detached')
        live.deleted = ended.deleted = False
        self.assertEqual((True, False), (attachments.row_is_live(live),
                                         attachments.row_is_live(ended)))
        live.deleted = True
        self.assertFalse(attachments.row_is_live(live))

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
              ({'other': 'x'}, None),
              # Bound to attachments (Cinder's detach): while one is live.
              ({attachments.TEARDOWN_MARK:
                '{"attachments": ["1"], "every": false}'}, [A]),
              ({attachments.TEARDOWN_MARK:
                '{"attachments": ["1"], "every": true}'}, [None]),
              ({attachments.TEARDOWN_MARK:
                '{"attachments": ["gone"], "every": true}'}, None))
    @ddt.unpack
    def test_hosts_in_teardown(self, admin_metadata, expected):
        """A malformed record means every host: never grant on a guess."""
        volume = types.SimpleNamespace(
            admin_metadata=admin_metadata,
            volume_attachment=[att('1', A), att('2', B, 'detached')])
        self.assertEqual(expected, attachments.hosts_in_teardown(volume))

    def test_teardown_record_round_trip(self):
        """Our force-detach keeps what names a host; Cinder's, the ids."""
        full = dict(A, platform='x86_64', os_type='linux', multipath=False)
        record = attachments.teardown_record([full, None])
        self.assertNotIn('x86_64', record)
        self.assertEqual(
            [{k: A[k] for k in attachments.HOST_FIELDS if A.get(k)}, None],
            attachments.parse_teardown(record, []))
        bound = attachments.teardown_record([full], ['1'])
        self.assertEqual([A], attachments.parse_teardown(
            bound, [att('1', A)]))
        self.assertIsNone(attachments.parse_teardown(bound, [att('3', B)]))

    def test_a_record_too_long_for_the_column_is_refused(self):
        hosts = [dict(A, host='compute%d' % i) for i in range(10)]
        self.assertRaises(ValueError, attachments.teardown_record, hosts)
        ids = ['%036d' % i for i in range(10)]
        self.assertRaises(ValueError, attachments.teardown_record, [A], ids)
