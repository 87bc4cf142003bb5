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

"""The mixin's pool capabilities and how it tells a force-detach."""

import copy
import json
import types
from unittest import mock

from cinder import exception
import fixtures
import testtools

from cinder_forcedetach import exception as fd_exception
from cinder_forcedetach.flows import force_detach as flow
from cinder_forcedetach import host_access
from cinder_forcedetach import mixin
from cinder_forcedetach import notifications
from tests import fakes

UPSTREAM = {'volume_backend_name': 'tgt', 'vendor_name': 'Open Source',
            'total_capacity_gb': 10, 'free_capacity_gb': 7}


class Upstream(object):
    """What the mixin finds after it in the MRO: Cinder's driver."""

    stats = UPSTREAM

    def __init__(self, *args, **kwargs):
        self.configuration = None
        self.host = 'volhost@tgt'

    def get_volume_stats(self, refresh=False):
        return copy.deepcopy(self.stats)

    def create_export(self, context, volume, connector):
        pass

    def remove_export(self, context, volume):
        pass

    def initialize_connection(self, volume, connector):
        return {}

    def ensure_export(self, context, volume):
        pass


class Driver(mixin.ForceDetachMixin, Upstream):
    pass


class VolumeStatsTestCase(testtools.TestCase):

    def setUp(self):
        super(VolumeStatsTestCase, self).setUp()
        notifications.reset_counts()
        self.addCleanup(notifications.reset_counts)
        self.driver = Driver()

    def test_counts_beside_upstreams_stats(self):
        notifications.detach_forced(None, 'volhost@tgt', 'operator', {})
        notifications.detach_forced(None, 'volhost@tgt', 'grant', {})
        notifications.detach_forced(None, 'other@rbd', 'host', {})
        stats = self.driver.get_volume_stats(refresh=True)
        self.assertEqual(UPSTREAM, {k: stats[k] for k in UPSTREAM})
        self.assertEqual({'operator': 1, 'reconciler': 0, 'grant': 1,
                          'host': 0, 'audit': 0},
                         stats[mixin.FORCED_DETACHES])
        self.assertEqual(2, stats[mixin.FORCED_DETACHES_TOTAL])
        # A target's ACL keeps no fence records: no count at all.
        self.assertNotIn(mixin.FENCE_RECORDS, stats)
        self.assertEqual(set(UPSTREAM) | {mixin.FORCED_DETACHES,
                                          mixin.FORCED_DETACHES_TOTAL},
                         set(stats))

    def test_every_pool_gets_them(self):
        self.driver.stats = dict(UPSTREAM, pools=[
            {'pool_name': 'a', 'free_capacity_gb': 1},
            {'pool_name': 'b', 'free_capacity_gb': 2}])
        notifications.detach_forced(None, 'volhost@tgt', 'reconciler', {})
        stats = self.driver.get_volume_stats(refresh=True)
        for pool, name in zip(stats['pools'], 'ab'):
            self.assertEqual(name, pool['pool_name'])
            self.assertEqual(1, pool[mixin.FORCED_DETACHES]['reconciler'])
            self.assertEqual(1, pool[mixin.FORCED_DETACHES_TOTAL])

    def test_fence_records_counted_on_refresh_only(self):
        counts = iter([3, 5])
        self.driver.count_fence_records = lambda: next(counts)
        self.assertEqual(3, self.driver.get_volume_stats(True)[
            mixin.FENCE_RECORDS])
        self.assertEqual(3, self.driver.get_volume_stats(False)[
            mixin.FENCE_RECORDS])
        self.assertEqual(5, self.driver.get_volume_stats(True)[
            mixin.FENCE_RECORDS])

    def test_a_failed_count_leaves_the_stats_alone(self):
        def fail():
            raise RuntimeError('cluster unreachable')
        self.driver.count_fence_records = fail
        stats = self.driver.get_volume_stats(True)
        self.assertNotIn(mixin.FENCE_RECORDS, stats)
        self.assertEqual(7, stats['free_capacity_gb'])

    def test_a_driver_no_volume_service_runs_adds_nothing(self):
        self.driver.host = None
        self.driver.count_fence_records = lambda: 1 / 0
        self.assertEqual(UPSTREAM, self.driver.get_volume_stats(True))

    def test_no_stats_stay_none(self):
        self.driver.stats = {}
        self.assertEqual({}, self.driver.get_volume_stats(True))

    def test_the_reconcilers_counts_while_it_runs(self):
        self.driver.reconciler = types.SimpleNamespace(
            running=True,
            capabilities=lambda: {'forcedetach_reconcile_passes': 4})
        stats = self.driver.get_volume_stats(True)
        self.assertEqual(4, stats['forcedetach_reconcile_passes'])
        self.assertIn(mixin.FORCED_DETACHES, stats)


#: Cinder's volume manager as far as the mixin looks at it: the functions
#: that call the driver's terminate_connection, in a module of that name.
MANAGER = '''
def terminate_connection(driver, volume, connector):
    return driver.terminate_connection(volume, connector, force=False)


def _detach_volume(driver, volume, connector):
    return terminate_connection(driver, volume, connector)


def _connection_terminate(driver, volume, connector):
    return driver.terminate_connection(volume, connector, force=False)


def _connection_create(driver, volume, attachment, connector):
    return driver.initialize_connection(volume, connector)


def initialize_connection(driver, volume, connector):
    return driver.initialize_connection(volume, connector)
'''


def volume(status='in-use', migration_status=None):
    return types.SimpleNamespace(id='vol-1', status=status,
                                 migration_status=migration_status)


class TerminateConnectionReasonTestCase(testtools.TestCase):
    """os-force_detach is ``operator``; Cinder's other calls no reason."""

    def setUp(self):
        super(TerminateConnectionReasonTestCase, self).setUp()
        self.manager = {'__name__': mixin._MANAGER}
        exec(compile(MANAGER, 'cinder/volume/manager.py', 'exec'),
             self.manager)
        self.run = self.useFixture(fixtures.MockPatchObject(
            flow, 'run', return_value=False)).mock
        objects = self.useFixture(fixtures.MockPatchObject(
            mixin, 'objects')).mock
        objects.VolumeAttachmentList.get_all_by_volume_id.return_value = []
        self.driver = Driver()

    def reason(self, caller, vol, connector):
        self.run.reset_mock()
        self.manager[caller](self.driver, vol, connector)
        return self.run.call_args[1]['reason']

    def test_os_force_detach(self):
        self.assertEqual('operator', self.reason(
            'terminate_connection', volume(), None))
        self.assertEqual('operator', self.reason(
            'terminate_connection', volume(), fakes.CONNECTOR_A))
        self.assertEqual('operator', self.reason(
            'terminate_connection', volume('error_detaching'), None))

    def test_a_volume_stuck_detaching_without_a_connector(self):
        self.assertEqual('operator', self.reason(
            'terminate_connection', volume('detaching'), None))

    def test_legacy_detach_is_not_forced(self):
        self.assertIsNone(self.reason(
            'terminate_connection', volume('detaching'), fakes.CONNECTOR_A))

    def test_attachment_delete_is_not_forced(self):
        self.assertIsNone(self.reason(
            '_connection_terminate', volume(), fakes.CONNECTOR_A))

    def test_cinders_own_host_copies_are_not_forced(self):
        self.assertIsNone(self.reason(
            '_detach_volume', volume(), fakes.CONNECTOR_A))
        self.assertIsNone(self.reason(
            'terminate_connection', volume('backing-up'), fakes.CONNECTOR_A))
        self.assertIsNone(self.reason(
            'terminate_connection', volume('available', 'migrating'),
            fakes.CONNECTOR_A))

    def test_a_direct_call_is_not_forced(self):
        self.driver.terminate_connection(volume(), fakes.CONNECTOR_A)
        self.assertIsNone(self.run.call_args[1]['reason'])

    def test_force_detach_is_operator_by_default(self):
        self.driver.force_detach('ctx', volume())
        self.assertEqual('operator', self.run.call_args[1]['reason'])
        self.driver.force_detach('ctx', volume(), reason='audit')
        self.assertEqual('audit', self.run.call_args[1]['reason'])


class FenceHostTestCase(testtools.TestCase):
    """The generic host fence: the flow per volume; no address-wide cut."""

    CONNECTOR = {'host': 'compute1', 'ip': '10.0.0.5',
                 'initiator': 'iqn.2026-11.org.example:compute1'}

    def setUp(self):
        super(FenceHostTestCase, self).setUp()
        self.run_host = self.useFixture(fixtures.MockPatchObject(
            flow, 'run_host', return_value='report')).mock
        self.driver = Driver()

    def test_each_volume_through_the_flow_of_reason_host(self):
        self.assertEqual('report', self.driver.fence_host(
            'ctxt', self.CONNECTOR, ['v1', 'v2']))
        args, kwargs = self.run_host.call_args
        self.assertEqual(('ctxt', self.driver, ['v1', 'v2'],
                          self.CONNECTOR), args[:4])
        # Nothing fenced in one pass: each volume's own fence_clients.
        self.assertEqual({}, args[4]([('v1', ['10.0.0.5:0/1'])]))
        self.assertEqual(notifications.HOST, kwargs['reason'])
        # A hostile connector is refused before any flow.
        from cinder import exception
        self.run_host.reset_mock()
        self.assertRaises(exception.InvalidConnectorException,
                          self.driver.fence_host, 'ctxt',
                          dict(self.CONNECTOR, initiator='ALL'), ['v1'])
        self.run_host.assert_not_called()

    def test_ip_wide_refused_before_anything(self):
        from cinder import exception

        err = self.assertRaises(exception.InvalidInput,
                                self.driver.fence_host, 'ctxt',
                                self.CONNECTOR, ['v1'], ip_wide=True)
        self.assertIn('Driver cannot fence a host\'s whole address',
                      str(err))
        self.run_host.assert_not_called()


class GrantUnderLockTestCase(testtools.TestCase):
    """A grant is handed back only while the lock service confirms the lock.

    The window it closes is proven on real etcd and tgtd in
    ``tests/functional/test_cluster.py``
    (``test_lease_lost_before_the_grant_grants_nothing``).
    """

    CONNECTOR = {'host': 'compute1', 'initiator': 'iqn.2026-11.org.ex:c1'}

    def setUp(self):
        super(GrantUnderLockTestCase, self).setUp()
        self.lock = mock.MagicMock()
        self.useFixture(fixtures.MockPatchObject(
            mixin.locks, 'volume_lock', return_value=self.lock))
        self.ours = self.useFixture(fixtures.MockPatchObject(
            mixin.locks, 'lock_is_ours', return_value=True)).mock
        self.driver = Driver()
        self.driver._check_grant = mock.Mock(return_value=None)
        self.driver.revoke_host_access = mock.Mock(return_value=False)
        self.volume = types.SimpleNamespace(id='vol')

    def test_confirmed_lock_hands_the_grant_back(self):
        self.assertEqual({}, self.driver.initialize_connection(
            self.volume, self.CONNECTOR))
        self.ours.assert_called_once_with(self.lock)
        self.lock.release.assert_called_once_with()
        self.driver.revoke_host_access.assert_not_called()

    def test_lease_lost_during_the_grant_revokes_it_and_fails(self):
        self.ours.return_value = False
        err = self.assertRaises(fd_exception.LockLost,
                                self.driver.initialize_connection,
                                self.volume, self.CONNECTOR)
        self.assertIn('lease lost during the grant', str(err))
        self.driver.revoke_host_access.assert_called_once_with(
            self.volume, self.CONNECTOR)

    def test_revoke_failure_still_fails_the_grant(self):
        self.ours.return_value = False
        self.driver.revoke_host_access.side_effect = RuntimeError('tgtd')
        self.assertRaises(fd_exception.LockLost,
                          self.driver.initialize_connection,
                          self.volume, self.CONNECTOR)

    def test_no_host_named_no_grant_to_confirm(self):
        self.ours.return_value = False
        self.assertEqual({}, self.driver.initialize_connection(
            self.volume, None))
        self.ours.assert_not_called()


class GrantedAttachmentTestCase(testtools.TestCase):
    """The attachment Cinder's update grants: live, and recorded in time.

    The races themselves run on real Cinder and tgtd in
    ``tests/functional/test_iscsi_grant_race.py``.
    """

    CONNECTOR = {'host': 'compute4', 'initiator': 'iqn.2026-11.org.ex:c4'}

    def setUp(self):
        super(GrantedAttachmentTestCase, self).setUp()
        self.manager = {'__name__': mixin._MANAGER}
        exec(compile(MANAGER, 'cinder/volume/manager.py', 'exec'),
             self.manager)
        self.useFixture(fixtures.MockPatchObject(
            mixin.locks, 'volume_lock', return_value=mock.MagicMock()))
        self.useFixture(fixtures.MockPatchObject(
            mixin.locks, 'lock_is_ours', return_value=True))
        self.objects = self.useFixture(fixtures.MockPatchObject(
            mixin, 'objects')).mock
        self.objects.Volume.get_by_id.return_value = types.SimpleNamespace(
            id='vol-1', status='in-use', volume_attachment=[])
        self.useFixture(fixtures.MockPatchObject(
            mixin.grant_fence, 'fence_before_grant'))
        self.db = self.useFixture(fixtures.MockPatchObject(
            mixin, 'db_api')).mock
        self.driver = Driver()
        self.driver.revoke_host_access = mock.Mock(return_value=False)

    def grant(self, caller, *args):
        return self.manager[caller](self.driver, volume(), *args,
                                    self.CONNECTOR)

    def attachment(self, status, deleted=False):
        self.objects.VolumeAttachment.get_by_id.return_value = \
            types.SimpleNamespace(attach_status=status, deleted=deleted)

    def test_an_ended_attachment_is_refused_on_an_in_use_volume(self):
        for status, deleted in (('detached', True), ('detached', False),
                                ('deleted', True)):
            self.attachment(status, deleted)
            err = self.assertRaises(
                exception.InvalidVolume, self.grant, '_connection_create',
                types.SimpleNamespace(id='att-4'))
            self.assertIn('attachment att-4 of host compute4 ended', str(err))

    def test_a_live_attachment_is_granted_and_recorded_under_the_lock(self):
        self.attachment('reserved')
        self.assertEqual({}, self.grant('_connection_create',
                                        types.SimpleNamespace(id='att-4')))
        self.objects.VolumeAttachment.get_by_id.assert_called_once_with(
            mock.ANY, 'att-4')
        # Cinder's own values, written before the lock is released
        self.db.volume_attachment_update.assert_called_once_with(
            mock.ANY, 'att-4', {'attach_status': 'attaching',
                                'connector': json.dumps(self.CONNECTOR)})
        self.driver.revoke_host_access.assert_not_called()

    def grant_deleted_meanwhile(self):
        """A grant whose attachment is gone when it records; the error."""
        self.attachment('reserved')
        self.db.volume_attachment_update.side_effect = (
            exception.VolumeAttachmentNotFound(filter='att-4'))
        return self.assertRaises(
            exception.InvalidVolume, self.grant, '_connection_create',
            types.SimpleNamespace(id='att-4'))

    def test_an_attachment_deleted_during_the_grant_gets_nothing(self):
        err = self.grant_deleted_meanwhile()
        self.assertIn('deleted during its grant', str(err))
        self.driver.revoke_host_access.assert_called_once_with(
            mock.ANY, self.CONNECTOR)

    def test_deleted_during_the_grant_another_of_the_host_keeps_access(self):
        self.objects.Volume.get_by_id.return_value = types.SimpleNamespace(
            id='vol-1', status='in-use', volume_attachment=[
                types.SimpleNamespace(id='att-3', attach_status='attached',
                                      connector=dict(self.CONNECTOR))])
        self.grant_deleted_meanwhile()
        self.driver.revoke_host_access.assert_not_called()

    def test_the_legacy_grant_names_no_attachment(self):
        self.assertEqual({}, self.grant('initialize_connection'))
        self.objects.VolumeAttachment.get_by_id.assert_not_called()
        self.db.volume_attachment_update.assert_not_called()


class UnrecordedGrantTestCase(testtools.TestCase):
    """A grant whose attachment was deleted before Cinder finished it goes.

    Cinder writes the host's connector on the attachment only after the
    grant; a delete in between skips the backend, and the update then
    fails: the host would keep access that no attachment explains.  Seen
    as a ``leaked_export`` after the 50-call storm of
    ``tests/functional/test_cluster.py``; proven there on real etcd and
    tgtd (``test_attachment_deleted_right_after_its_grant_keeps_none``).
    """

    CONNECTOR = {'host': 'compute1', 'initiator': 'iqn.2026-11.org.ex:c1'}

    def setUp(self):
        super(UnrecordedGrantTestCase, self).setUp()
        self.lock = mock.MagicMock()
        self.useFixture(fixtures.MockPatchObject(
            mixin.locks, 'volume_lock', return_value=self.lock))
        self.useFixture(fixtures.MockPatchObject(
            mixin.locks, 'lock_is_ours', return_value=True))
        self.thread = self.useFixture(fixtures.MockPatchObject(
            mixin.threading, 'Thread')).mock
        self.useFixture(fixtures.MockPatchObject(mixin.time, 'sleep'))
        self.driver = Driver()
        self.driver.revoke_host_access = mock.Mock(return_value=False)
        self.driver.remove_export_unlocked = mock.Mock()
        self.rows = []      # what each poll reads of attachment 'a1'
        self.useFixture(fixtures.MockPatchObject(
            mixin.objects.VolumeAttachment, 'get_by_id',
            side_effect=lambda ctxt, att_id: self.rows.pop(0)))
        self.volume_now = None
        self.useFixture(fixtures.MockPatchObject(
            mixin.objects.Volume, 'get_by_id',
            side_effect=lambda ctxt, vol_id: self.volume_now))

    @staticmethod
    def att(connector=None, status='reserved', deleted=False, att_id='a1',
            attach_time=None):
        return types.SimpleNamespace(id=att_id, attach_status=status,
                                     connector=connector, deleted=deleted,
                                     attach_time=attach_time)

    def volume(self, *atts, status='reserved'):
        return types.SimpleNamespace(id='vol', status=status,
                                     volume_attachment=list(atts))

    def grant(self, fresh, connector=None):
        self.driver._check_grant = mock.Mock(return_value=fresh)
        self.driver.initialize_connection(fresh, connector or self.CONNECTOR)

    def test_a_pending_attachment_starts_the_watch(self):
        self.grant(self.volume(self.att()))
        self.thread.assert_called_once_with(
            target=self.driver._confirm_grant, daemon=True,
            args=('vol', self.CONNECTOR, ['a1']))

    def test_no_watch_where_nothing_is_pending(self):
        # recorded already (a second attachment of the host), the legacy
        # attach (no attachment row yet), the service's own host
        self.grant(self.volume(self.att(), self.att(dict(self.CONNECTOR),
                                                    'attached', att_id='a0')))
        self.grant(self.volume())
        self.grant(self.volume(self.att()), dict(
            self.CONNECTOR, host=sorted(self.driver.local_host_names())[0]))
        self.thread.assert_not_called()

    def test_cinders_finished_update_confirms_the_grant(self):
        # the grant's own record, then Cinder's (attaching until Nova's
        # os-complete)
        self.rows = [self.att(), self.att(dict(self.CONNECTOR), 'attaching'),
                     self.att(dict(self.CONNECTOR), 'attaching',
                              attach_time='2026-11-29T01:40:00')]
        self.driver._confirm_grant('vol', self.CONNECTOR, ['a1'])
        self.assertEqual([], self.rows)
        self.driver.revoke_host_access.assert_not_called()

    def test_finished_then_ended_by_a_reset_stays_confirmed(self):
        # what a reset leaves is the audit's and the grant fence's
        self.rows = [self.att(dict(self.CONNECTOR), 'attaching'),
                     self.att(dict(self.CONNECTOR), 'detached', deleted=True,
                              attach_time='2026-11-29T01:40:00')]
        self.driver._confirm_grant('vol', self.CONNECTOR, ['a1'])
        self.assertEqual([], self.rows)
        self.driver.revoke_host_access.assert_not_called()

    def test_recorded_by_the_grant_then_deleted_reserved_revokes(self):
        # the grant wrote the connector; a delete that had read the
        # attachment reserved skipped the backend
        self.rows = [self.att(dict(self.CONNECTOR), 'attaching'),
                     self.att(dict(self.CONNECTOR), 'detached',
                              deleted=True)]
        self.volume_now = self.volume(status='available')
        self.driver._confirm_grant('vol', self.CONNECTOR, ['a1'])
        self.driver.revoke_host_access.assert_called_once_with(
            self.volume_now, self.CONNECTOR)

    def test_deleted_unrecorded_revokes_the_host_and_the_export(self):
        self.rows = [self.att(), self.att(status='detached', deleted=True)]
        self.volume_now = self.volume(status='available')
        self.driver._confirm_grant('vol', self.CONNECTOR, ['a1'])
        self.driver.revoke_host_access.assert_called_once_with(
            self.volume_now, self.CONNECTOR)
        self.driver.remove_export_unlocked.assert_called_once_with(
            mock.ANY, self.volume_now)
        self.lock.acquire.assert_called_once_with(blocking=True)

    def test_in_use_volume_keeps_its_export(self):
        self.rows = [self.att(status='detached', deleted=True)]
        self.volume_now = self.volume(
            self.att({'host': 'compute2', 'initiator': 'iqn.x:c2'},
                     'attached', att_id='a2'), status='in-use')
        self.driver._confirm_grant('vol', self.CONNECTOR, ['a1'])
        self.driver.revoke_host_access.assert_called_once_with(
            self.volume_now, self.CONNECTOR)
        self.driver.remove_export_unlocked.assert_not_called()

    def test_attached_again_under_the_lock_keeps_access(self):
        self.rows = [self.att(status='detached', deleted=True)]
        self.volume_now = self.volume(self.att(att_id='a3'))
        self.driver._confirm_grant('vol', self.CONNECTOR, ['a1'])
        self.driver.revoke_host_access.assert_not_called()

    def test_never_recorded_is_left_to_the_reconciler(self):
        self.driver.grant_confirm_seconds = 0.0
        self.driver._confirm_grant('vol', self.CONNECTOR, ['a1'])
        self.driver.revoke_host_access.assert_not_called()


class ReexportUnderLockTestCase(testtools.TestCase):
    """A re-export is handed back only while the lock is confirmed.

    Proven on real etcd and tgtd in ``tests/functional/test_cluster.py``
    (``test_lease_lost_during_the_reexport_grants_nothing_again``).
    """

    def setUp(self):
        super(ReexportUnderLockTestCase, self).setUp()
        self.useFixture(fixtures.MockPatchObject(
            mixin.locks, 'volume_lock', return_value=mock.MagicMock()))
        self.ours = self.useFixture(fixtures.MockPatchObject(
            mixin.locks, 'lock_is_ours', return_value=False)).mock
        self.driver = Driver()
        self.driver.ensure_export_unlocked = mock.Mock(return_value='model')
        self.driver.remove_export_unlocked = mock.Mock()
        self.driver.revoke_host_access = mock.Mock(return_value=True)
        self.volume = mock.Mock(id='vol', status='in-use')

    def reread(self, status, attachments=()):
        fresh = types.SimpleNamespace(id='vol', status=status,
                                      volume_attachment=list(attachments))
        self.useFixture(fixtures.MockPatchObject(
            mixin.objects.Volume, 'get_by_id', return_value=fresh))
        return fresh

    def test_confirmed_lock_hands_the_export_back(self):
        self.ours.return_value = True
        self.assertEqual('model', self.driver.ensure_export(
            'ctxt', self.volume))
        self.driver.remove_export_unlocked.assert_not_called()

    def test_torn_down_meanwhile_the_export_goes(self):
        fresh = self.reread('available')
        err = self.assertRaises(fd_exception.LockLost,
                                self.driver.ensure_export, 'ctxt',
                                self.volume)
        self.assertIn('lease lost during the re-export', str(err))
        self.driver.remove_export_unlocked.assert_called_once_with(
            'ctxt', fresh)
        self.driver.revoke_host_access.assert_not_called()

    def test_still_in_use_only_unexplained_hosts_are_revoked(self):
        a, b = fakes.CONNECTOR_A, fakes.CONNECTOR_B
        fresh = self.reread('in-use', [fakes.attachment('att-b', b),
                                       fakes.attachment('old', a,
                                                        'detached')])
        self.driver.volume_holders = lambda volume: [
            host_access.Holder('acl', host_access.connector_keys(c),
                               c['initiator'], c) for c in (a, b)]
        self.assertRaises(fd_exception.LockLost, self.driver.ensure_export,
                          'ctxt', self.volume)
        self.driver.revoke_host_access.assert_called_once_with(fresh, a)
        self.driver.remove_export_unlocked.assert_not_called()


class RefreshUnderLockTestCase(testtools.TestCase):
    """An attachment's refresh decides under the lock, on a fresh read."""

    def setUp(self):
        super(RefreshUnderLockTestCase, self).setUp()
        self.useFixture(fixtures.MockPatchObject(
            mixin.locks, 'volume_lock', return_value=mock.MagicMock()))
        self.ours = self.useFixture(fixtures.MockPatchObject(
            mixin.locks, 'lock_is_ours', return_value=True)).mock
        self.useFixture(fixtures.MockPatchObject(
            mixin.objects.Volume, 'get_by_id',
            return_value=types.SimpleNamespace(id='vol', status='in-use',
                                               volume_attachment=[])))
        self.driver = Driver()
        self.driver.initialize_connection_unlocked = mock.Mock(
            return_value={'driver_volume_type': 'iscsi', 'data': {}})
        self.driver.validate_connector = mock.Mock()
        self.judge = self.useFixture(fixtures.MockPatchObject(
            self.driver, '_judge_again')).mock
        self.stale = fakes.attachment('att', fakes.CONNECTOR_A)
        self.stale.volume_id = 'vol'
        self.fresh = mock.Mock(id='att', connector=fakes.CONNECTOR_A,
                               attach_status='attached', connection_info={})
        self.get = self.useFixture(fixtures.MockPatchObject(
            mixin.objects.VolumeAttachment, 'get_by_id',
            return_value=self.fresh)).mock

    def test_stored_on_the_attachment_read_under_the_lock(self):
        info = self.driver.refresh_connection_info('ctxt', self.stale)
        self.get.assert_called_once_with('ctxt', 'att')
        self.fresh.save.assert_called_once_with()
        self.assertEqual(info, self.fresh.connection_info)
        self.judge.assert_not_called()

    def test_ended_meanwhile_nothing_is_granted(self):
        self.fresh.attach_status = 'detached'
        err = self.assertRaises(exception.InvalidInput,
                                self.driver.refresh_connection_info, 'ctxt',
                                self.stale)
        self.assertIn('status detached', str(err))
        self.get.side_effect = exception.VolumeAttachmentNotFound(
            filter='att')
        err = self.assertRaises(exception.InvalidInput,
                                self.driver.refresh_connection_info, 'ctxt',
                                self.stale)
        self.assertIn('status deleted', str(err))
        self.driver.initialize_connection_unlocked.assert_not_called()

    def test_lease_lost_judged_again_nothing_stored(self):
        self.ours.return_value = False
        err = self.assertRaises(fd_exception.LockLost,
                                self.driver.refresh_connection_info, 'ctxt',
                                self.stale)
        self.assertIn('lease lost during the refresh', str(err))
        self.judge.assert_called_once_with('ctxt', 'vol')
        self.fresh.save.assert_not_called()


class JudgeAgainTestCase(testtools.TestCase):

    def test_lock_service_still_down_leaves_it_to_the_reconciler(self):
        lock = mock.Mock(**{'acquire.side_effect': OSError('etcd down')})
        self.useFixture(fixtures.MockPatchObject(
            mixin.locks, 'volume_lock', return_value=lock))
        driver = Driver()
        driver.revoke_host_access = mock.Mock()
        driver.remove_export_unlocked = mock.Mock()
        log = self.useFixture(fixtures.FakeLogger())
        driver._judge_again('ctxt', 'vol')
        self.assertIn('the reconciler cuts', log.output)
        driver.revoke_host_access.assert_not_called()
        driver.remove_export_unlocked.assert_not_called()
