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

"""One function counts a forced detach and notifies it."""

from unittest import mock

import fixtures
import testtools

from cinder_forcedetach import notifications


class DetachForcedTestCase(testtools.TestCase):

    def setUp(self):
        super(DetachForcedTestCase, self).setUp()
        notifications.reset_counts()
        self.addCleanup(notifications.reset_counts)
        self.initialized = self.useFixture(fixtures.MockPatch(
            'cinder.rpc.initialized', return_value=True)).mock
        self.get_notifier = self.useFixture(fixtures.MockPatch(
            'cinder.rpc.get_notifier')).mock
        self.notifier = self.get_notifier.return_value

    def test_counted_and_sent_at_info(self):
        sent = notifications.detach_forced(
            'ctx', 'vol@tgt', notifications.OPERATOR,
            {'volume_id': 'v1', 'hosts': ['compute1']})
        self.assertEqual({'volume_id': 'v1', 'hosts': ['compute1'],
                          'reason': 'operator'}, sent)
        self.get_notifier.assert_called_once_with('volume', 'vol@tgt')
        self.notifier.info.assert_called_once_with(
            'ctx', 'forcedetach.detach.forced', sent)
        self.assertEqual(
            {'operator': 1, 'reconciler': 0, 'grant': 0, 'host': 0,
             'audit': 0}, notifications.forced_counts('vol@tgt'))

    def test_counts_by_backend_and_reason(self):
        for host, reason in (('a@tgt', 'grant'), ('a@tgt', 'grant'),
                             ('a@tgt', 'reconciler'), ('b@rbd', 'host')):
            notifications.detach_forced(None, host, reason,
                                        {'volume_id': 'v'})
        self.assertEqual(
            {'operator': 0, 'reconciler': 1, 'grant': 2, 'host': 0,
             'audit': 0}, notifications.forced_counts('a@tgt'))
        self.assertEqual(1, notifications.forced_counts('b@rbd')['host'])
        self.assertEqual(4, sum(notifications.forced_counts().values()))
        self.assertEqual(0, sum(notifications.forced_counts(
            'c@lvm').values()))

    def test_a_reason_outside_the_list_is_counted_too(self):
        notifications.detach_forced(None, 'a@tgt', 'other', {})
        self.assertEqual(1, notifications.forced_counts('a@tgt')['other'])

    def test_a_failed_send_is_logged_and_still_counted(self):
        self.notifier.info.side_effect = RuntimeError('rabbit down')
        notifications.detach_forced(None, 'a@tgt', 'grant', {})
        self.assertEqual(1, notifications.forced_counts('a@tgt')['grant'])

    def test_without_messaging_nothing_is_sent(self):
        self.initialized.return_value = False
        notifications.detach_forced(None, 'a@tgt', 'operator', {})
        self.get_notifier.assert_not_called()
        self.assertEqual(1, notifications.forced_counts('a@tgt')[
            'operator'])

    def test_payload_reason_is_the_counted_one(self):
        notifications.detach_forced(None, 'a@tgt', 'grant',
                                    {'reason': 'operator'})
        self.assertEqual('grant',
                         self.notifier.info.call_args[0][2]['reason'])
        self.assertEqual(mock.call(None, 'forcedetach.detach.forced',
                                   {'reason': 'grant'}),
                         self.notifier.info.call_args)
