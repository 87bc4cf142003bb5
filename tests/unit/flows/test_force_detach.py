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

"""Decisions of the force-detach flow that need no backend."""

import ddt
import testtools

from cinder_forcedetach.flows import force_detach as flow
from tests import fakes

A = fakes.CONNECTOR_A
B = fakes.CONNECTOR_B
att = fakes.attachment


@ddt.ddt
class FlowDecisionsTestCase(testtools.TestCase):

    @ddt.unpack
    @ddt.data(
        ('explicit connector wins', A, [att('1', B)], [], [A]),
        ('nothing remains: every host', None, [att('1', A)], [], [None]),
        ('nothing at all: every host', None, [], [], [None]),
        ('others remain: only the detaching hosts', None, [att('1', A)],
         [att('2', B)], [A]),
        ('others remain, reserved attachment: nobody', None,
         [att('1', None, 'reserved')], [att('2', B)], []),
    )
    def test_connectors_to_revoke(self, case, connector, detaching,
                                  remaining, expected):
        self.assertEqual(expected, flow.connectors_to_revoke(
            connector, detaching, remaining), case)

    def test_flow_order(self):
        names = [task.name.replace(flow.__name__ + '.', '')
                 for task, _meta in flow.get_flow(None).iter_nodes()]
        self.assertEqual(['LockVolumeTask', 'ResolveAttachmentsTask',
                          'RecordTeardownTask', 'NotifyTask;detach.start',
                          'DisconnectLocalHostTask', 'RevokeHostAccessTask',
                          'FenceClientsTask', 'RemoveExportTask',
                          'ResetDatabaseTask', 'NotifyTask;detach.end',
                          'ReleaseLockTask'], names)

    def test_cinder_terminate_connection_flow_order(self):
        """The same tasks, without the database and notifications."""
        names = [task.name.replace(flow.__name__ + '.', '')
                 for task, _meta in
                 flow.get_flow(None, reset_database=False).iter_nodes()]
        self.assertEqual(['LockVolumeTask', 'ResolveAttachmentsTask',
                          'RecordTeardownTask', 'DisconnectLocalHostTask',
                          'RevokeHostAccessTask',
                          'FenceClientsTask', 'RemoveExportTask',
                          'ReleaseLockTask'], names)
