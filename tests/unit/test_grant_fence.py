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

"""Which holders a grant cuts (the choice; the cut is proven functionally).

The backends and the cut itself are real in
``tests/functional/test_*_second_writer.py``; here only the rule that picks
the holders no live attachment explains.
"""

import types

import fixtures
import testtools

from cinder_forcedetach import grant_fence
from cinder_forcedetach import host_access
from cinder_forcedetach import notifications
from tests import fakes

A = fakes.CONNECTOR_A
B = fakes.CONNECTOR_B
C = {'host': 'compute3', 'initiator': 'iqn.c', 'ip': '10.0.0.3'}


def att(att_id, connector, instance, status='attached'):
    return types.SimpleNamespace(id=att_id, connector=connector,
                                 attach_status=status,
                                 instance_uuid=instance)


def holder(kind, connector, label):
    return host_access.Holder(kind, host_access.connector_keys(connector),
                              label, connector)


def volume(multiattach=False):
    return types.SimpleNamespace(id='vol', multiattach=multiattach)


HOLDER_A = holder('session', {'initiator': 'iqn.a'}, 'iqn.a')
HOLDER_B = holder('acl', {'initiator': 'iqn.b'}, 'iqn.b')


class ExplainingTestCase(testtools.TestCase):

    def cut(self, vol, attachments, connector, holders):
        return grant_fence.unexplained(holders, grant_fence.
                                       explaining_connectors(
                                           vol, attachments, connector))

    def test_reset_left_no_row_everyone_else_is_cut(self):
        self.assertEqual([HOLDER_A], self.cut(
            volume(), [att('new', None, 'y', 'reserved')], B,
            [HOLDER_A, HOLDER_B]))

    def test_status_only_reset_other_instance_is_cut(self):
        rows = [att('old', A, 'x'), att('new', None, 'y', 'reserved')]
        self.assertEqual([HOLDER_A], self.cut(volume(), rows, B,
                                              [HOLDER_A]))

    def test_no_instance_explains_no_other_attachment(self):
        """Two attachments without an instance are not one instance's.

        Found by the soak's history checker: after a status-only reset,
        a host attached without an instance (a client other than Nova)
        kept writing a volume that is not multiattach once another host
        without an instance was granted it.
        """
        rows = [att('old', A, None), att('new', None, None, 'reserved')]
        self.assertEqual([HOLDER_A], self.cut(volume(), rows, B,
                                              [HOLDER_A]))
        rows = [att('old', A, None), att('new', None, 'y', 'reserved')]
        self.assertEqual([HOLDER_A], self.cut(volume(), rows, B,
                                              [HOLDER_A]))

    def test_live_migration_same_instance_keeps_the_source(self):
        rows = [att('src', A, 'x'), att('dst', None, 'x', 'reserved')]
        self.assertEqual([], self.cut(volume(), rows, B, [HOLDER_A]))

    def test_multiattach_live_attachment_explains(self):
        rows = [att('a', A, 'x'), att('b', None, 'y', 'reserved')]
        self.assertEqual([], self.cut(volume(True), rows, B, [HOLDER_A]))

    def test_ended_attachment_explains_nothing(self):
        rows = [att('a', A, 'x', 'detached'), att('b', None, 'y', 'reserved')]
        self.assertEqual([HOLDER_A], self.cut(volume(True), rows, B,
                                              [HOLDER_A]))

    def test_host_being_granted_keeps_its_own(self):
        self.assertEqual([], self.cut(volume(), [], A, [HOLDER_A]))

    def test_rbd_client_matched_by_ip(self):
        client = holder('watcher', {'ip': '10.0.0.3'}, '10.0.0.3:0/1')
        other = holder('watcher', {'ip': '10.0.0.9'}, '10.0.0.9:0/2')
        self.assertEqual([other], self.cut(volume(), [], C,
                                           [client, other]))

    def test_hostless_holders_are_not_cut(self):
        export = host_access.Holder('export', frozenset(), 'iqn.t', None)
        everyone = host_access.Holder('address-acl',
                                      frozenset({host_access.ANY_HOST}), 'ALL',
                                      None)
        self.assertEqual([], self.cut(volume(), [], B, [export, everyone]))


class FenceBeforeGrantTestCase(testtools.TestCase):
    """The hooks a grant calls, in order, with what."""

    class Driver(object):
        host = 'volhost@tgt'

        def __init__(self, holders):
            self.holders = holders
            self.calls = []

        def volume_holders(self, volume):
            self.calls.append(('holders',))
            return self.holders

        def revoke_host_access(self, volume, connector):
            self.calls.append(('revoke', connector))

        def fence_clients(self, volume, connectors, keep):
            self.calls.append(('fence', connectors,
                               [k.connector for k in keep]))

    def test_nothing_to_cut_calls_no_hook(self):
        driver = self.Driver([HOLDER_B])
        self.assertEqual([], grant_fence.fence_before_grant(
            driver, None, volume(), B, []))
        self.assertEqual([('holders',)], driver.calls)

    def test_driver_that_cannot_tell(self):
        driver = self.Driver(None)
        self.assertEqual([], grant_fence.fence_before_grant(
            driver, None, volume(), B, []))

    def test_read_error_fails_the_grant(self):
        driver = self.Driver([])
        driver.volume_holders = lambda v: 1 / 0
        self.assertRaises(ZeroDivisionError, grant_fence.fence_before_grant,
                          driver, None, volume(), B, [])

    def test_cut_is_counted_and_notified_as_grant(self):
        notifications.reset_counts()
        self.addCleanup(notifications.reset_counts)
        self.useFixture(fixtures.MockPatchObject(grant_fence, '_record'))
        notify = self.useFixture(fixtures.MockPatchObject(
            notifications, 'notify')).mock
        driver = self.Driver([HOLDER_A])
        cut = grant_fence.fence_before_grant(driver, 'ctx', volume(), B, [])
        self.assertEqual([HOLDER_A], cut)
        notify.assert_called_once_with(
            'ctx', 'volhost@tgt', notifications.DETACH_FORCED,
            {'volume_id': 'vol', 'granted_to': 'compute2',
             'cut': ['session iqn.a'], 'reason': 'grant'})
        self.assertEqual(1, notifications.forced_counts('volhost@tgt')[
            notifications.GRANT])
