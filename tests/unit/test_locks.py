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

"""The volume's lock: what the lock service confirms, on real tooz drivers."""

from unittest import mock

import fixtures
import testtools
from tooz import coordination as tooz_coordination
from tooz.drivers import etcd3gw as tooz_etcd3gw

from cinder_forcedetach import exception as fd_exception
from cinder_forcedetach import locks
from tests import fakes


class LockConfirmationTestCase(testtools.TestCase):
    """The flow asks the lock service before each step that changes state.

    Real tooz drivers: the file driver, and the etcd3gw driver pointed at a
    loopback port nothing listens on (an etcd that is down).
    """

    VOLUME = mock.Mock(id='11111111-2222-3333-4444-555555555555')

    def coordinator(self, url):
        coord = tooz_coordination.get_coordinator(url, b'test-member')
        coord.start(start_heart=False)
        self.addCleanup(coord.stop)
        return coord

    def file_lock(self):
        path = self.useFixture(fixtures.TempDir()).path
        return self.coordinator('file://' + path).get_lock(b'volume-lock')

    def test_held_file_lock_is_confirmed(self):
        lock = self.file_lock()
        self.assertTrue(lock.acquire())
        self.addCleanup(lock.release)
        self.assertTrue(locks.lock_is_ours(lock))
        locks.check_lock(lock, self.VOLUME, 'RevokeHostAccessTask')

    def test_released_lock_stops_the_step(self):
        lock = self.file_lock()
        lock.acquire()
        lock.release()
        self.assertFalse(locks.lock_is_ours(lock))
        err = self.assertRaises(fd_exception.LockLost, locks.check_lock,
                                lock, self.VOLUME, 'ResetDatabaseTask')
        self.assertIn('stopped before ResetDatabaseTask', str(err))

    def test_etcd_lock_never_acquired_is_not_ours(self):
        port = fakes.free_tcp_port()
        coord = tooz_coordination.get_coordinator(
            'etcd3+http://127.0.0.1:%d?timeout=1' % port, b'test-member')
        lock = coord.get_lock(b'volume-lock')
        self.assertFalse(locks.lock_is_ours(lock))

    def test_no_lock_no_check(self):
        """run_remove_export's caller holds no flow lock."""
        locks.check_lock(None, self.VOLUME, 'RemoveExportTask')


class ReleaseTestCase(testtools.TestCase):
    """A lock that cannot be released is dropped from tooz's heartbeat."""

    def etcd3gw_lock(self, **release):
        lock = mock.Mock(spec=tooz_etcd3gw.Etcd3Lock, **release)
        lock.name = 'cinder-forcedetach-vol'
        lock._coord = mock.Mock(_acquired_locks={lock})
        return lock

    def test_lease_ended_before_release_is_forgotten(self):
        lock = self.etcd3gw_lock(**{'release.return_value': False})
        locks.release(lock)
        self.assertEqual(set(), lock._coord._acquired_locks)

    def test_unreachable_lock_service_is_forgotten(self):
        lock = self.etcd3gw_lock(**{'release.side_effect': OSError('down')})
        locks.release(lock)
        self.assertEqual(set(), lock._coord._acquired_locks)

    def test_released_lock_is_left_to_tooz(self):
        lock = self.etcd3gw_lock(**{'release.return_value': True})
        locks.release(lock)
        self.assertEqual({lock}, lock._coord._acquired_locks)

    def test_held_releases_after_the_block(self):
        lock = mock.Mock()
        self.useFixture(fixtures.MockPatchObject(locks, 'volume_lock',
                                                 return_value=lock))
        with locks.held('vol') as got:
            self.assertIs(lock, got)
            lock.release.assert_not_called()
        lock.acquire.assert_called_once_with(blocking=True)
        lock.release.assert_called_once_with()
