"""Decisions of the force-detach flow that need no backend."""

import types

import ddt
import testtools

from cinder_forcedetach import attachments
from cinder_forcedetach.flows import force_detach as flow

A = {'host': 'compute1', 'initiator': 'iqn.a', 'wwpns': ['50014380186af83c']}
B = {'host': 'compute2', 'initiator': 'iqn.b', 'wwpns': ['50014380186af83e']}


def att(att_id, connector, status='attached'):
    return types.SimpleNamespace(id=att_id, connector=connector,
                                 attach_status=status)


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

    def test_flow_order(self):
        names = [task.name.replace(flow.__name__ + '.', '')
                 for task, _meta in flow.get_flow(None).iter_nodes()]
        self.assertEqual(['LockVolumeTask', 'ResolveAttachmentsTask',
                          'NotifyTask;detach.start',
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
                          'DisconnectLocalHostTask', 'RevokeHostAccessTask',
                          'FenceClientsTask', 'RemoveExportTask',
                          'ReleaseLockTask'], names)
