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

import json
import types
from unittest import mock

import ddt
import fixtures
import testtools

from cinder_forcedetach.flows import force_detach as flow
from cinder_forcedetach import notifications
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

    def test_forced_detach_flow_notifies_before_the_unlock(self):
        names = [task.name.replace(flow.__name__ + '.', '')
                 for task, _meta in flow.get_flow(
                     None, reason='operator').iter_nodes()]
        self.assertEqual(['ResetDatabaseTask', 'NotifyTask;detach.end',
                          'NotifyForcedTask;operator', 'ReleaseLockTask'],
                         names[-4:])
        names = [task.name.replace(flow.__name__ + '.', '')
                 for task, _meta in flow.get_flow(
                     None, reset_database=False,
                     reason='reconciler').iter_nodes()]
        self.assertEqual(['RemoveExportTask', 'NotifyForcedTask;reconciler',
                          'ReleaseLockTask'], names[-3:])


SECRET = 's3cr3t-chap'


def secret_attachment(att_id, connector):
    """An attachment row whose connection_info holds a CHAP secret."""
    return types.SimpleNamespace(
        id=att_id, connector=connector, attach_status='attached',
        connection_info={'auth_method': 'CHAP', 'auth_username': 'u',
                         'auth_password': SECRET, 'target_iqn': 'iqn.t'})


def secret_volume():
    return types.SimpleNamespace(id='vol-1',
                                 provider_auth='CHAP u %s' % SECRET)


class ForcedPayloadTestCase(testtools.TestCase):

    def assert_clean(self, payload):
        self.assertNotIn(SECRET, json.dumps(payload))
        self.assertNotIn('connection_info', json.dumps(payload))
        self.assertNotIn('auth', json.dumps(payload))

    def test_one_host(self):
        connector = dict(A, ip='10.0.0.1', nqn='nqn.a', platform='x86_64')
        payload = flow.forced_payload(
            secret_volume(), [connector], [secret_attachment('att-1', A)])
        self.assertEqual(
            {'volume_id': 'vol-1', 'all_hosts': False, 'hosts': ['compute1'],
             'initiators': ['50014380186af83c', 'iqn.a', 'nqn.a'],
             'ips': ['10.0.0.1'], 'attachment_ids': ['att-1'],
             'fenced': []}, payload)
        self.assert_clean(payload)

    def test_every_host_is_named_by_the_attachments_that_ended(self):
        payload = flow.forced_payload(
            secret_volume(), [None], [secret_attachment('att-2', B),
                                      secret_attachment('att-1', A)],
            fenced=['10.0.0.2:0/2', '10.0.0.1:0/1'])
        self.assertEqual(True, payload['all_hosts'])
        self.assertEqual(['compute1', 'compute2'], payload['hosts'])
        self.assertEqual(['att-1', 'att-2'], payload['attachment_ids'])
        self.assertEqual(['10.0.0.1:0/1', '10.0.0.2:0/2'],
                         payload['fenced'])
        self.assert_clean(payload)

    def test_a_rerun_names_the_attachment_it_was_given(self):
        payload = flow.forced_payload(secret_volume(), [None], [],
                                      attachment_id='att-9')
        self.assertEqual(['att-9'], payload['attachment_ids'])
        self.assertEqual([], payload['hosts'])


class NotifyForcedTaskTestCase(testtools.TestCase):

    def setUp(self):
        super(NotifyForcedTaskTestCase, self).setUp()
        notifications.reset_counts()
        self.addCleanup(notifications.reset_counts)
        self.notify = self.useFixture(fixtures.MockPatchObject(
            notifications, 'notify')).mock
        self.task = flow.NotifyForcedTask(
            types.SimpleNamespace(host='vol@tgt'), 'operator')

    def test_notified_and_counted_once(self):
        self.task.execute('ctx', secret_volume(), [A],
                          [secret_attachment('att-1', A)],
                          fenced=['10.0.0.1:0/1'],
                          forced_details={'why': 'reset'})
        self.notify.assert_called_once()
        ctxt, host, event, payload = self.notify.call_args[0]
        self.assertEqual(('ctx', 'vol@tgt', 'forcedetach.detach.forced'),
                         (ctxt, host, event))
        self.assertEqual(('vol-1', 'operator', 'reset', ['att-1'],
                          ['10.0.0.1:0/1']),
                         (payload['volume_id'], payload['reason'],
                          payload['why'], payload['attachment_ids'],
                          payload['fenced']))
        self.assertNotIn(SECRET, json.dumps(payload))
        self.assertEqual(1, notifications.forced_counts('vol@tgt')[
            'operator'])

    def test_a_host_that_keeps_its_access_is_not_a_forced_detach(self):
        self.task.execute('ctx', secret_volume(), [], [])
        self.notify.assert_not_called()
        self.assertEqual(0, sum(notifications.forced_counts().values()))


class FenceClientsTaskTestCase(testtools.TestCase):

    def test_provides_what_was_fenced(self):
        driver = types.SimpleNamespace(
            fence_clients=lambda volume, revoke, remaining: ['1.2.3.4:0/1'])
        task = flow.FenceClientsTask(driver)
        self.assertEqual({'fenced'}, set(task.provides))
        self.assertEqual(['1.2.3.4:0/1'], task.execute(
            secret_volume(), [A], [], None))
        self.assertEqual([], task.execute(secret_volume(), [], [], None))

    def test_a_batch_result_is_what_was_fenced(self):
        batch = flow.FenceBatch()
        batch.results['vol-1'] = ['5.6.7.8:0/2']
        task = flow.FenceClientsTask(None, batch)
        self.assertEqual(['5.6.7.8:0/2'],
                         task.execute(secret_volume(), [A], [], None))


class RunRemoveExportTestCase(testtools.TestCase):
    """Cinder's remove_export decides on the volume as read under the lock.

    Proven on real services in ``tests/functional/test_cluster.py``
    (``test_lease_lost_before_the_grant_grants_nothing``: Cinder's
    remove_export after a failed grant, on the volume it read before
    another host attached, kept that host's export).
    """

    def setUp(self):
        super(RunRemoveExportTestCase, self).setUp()
        self.lock = mock.Mock()
        self.useFixture(fixtures.MockPatchObject(
            flow.locks, 'volume_lock', return_value=self.lock))
        self.removed = []
        self.driver = types.SimpleNamespace(
            remove_export_unlocked=lambda ctxt, vol: self.removed.append(vol))
        self.stale = types.SimpleNamespace(id='vol-1', volume_attachment=[])

    def test_volume_read_again_under_the_lock(self):
        fresh = types.SimpleNamespace(id='vol-1',
                                      volume_attachment=[att('a', A)])
        get = self.useFixture(fixtures.MockPatchObject(
            flow.objects.Volume, 'get_by_id', return_value=fresh)).mock
        flow.run_remove_export('ctxt', self.driver, self.stale)
        get.assert_called_once_with('ctxt', 'vol-1')
        self.assertEqual([fresh], self.removed)
        self.lock.release.assert_called_once_with()

    def test_volume_deleted_meanwhile_uses_cinders_object(self):
        from cinder import exception
        self.useFixture(fixtures.MockPatchObject(
            flow.objects.Volume, 'get_by_id',
            side_effect=exception.VolumeNotFound(volume_id='vol-1')))
        flow.run_remove_export('ctxt', self.driver, self.stale)
        self.assertEqual([self.stale], self.removed)
