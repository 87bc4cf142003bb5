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

"""Cinder's own API paths reach our teardown (real API, RPC, manager, tgtd).

Also: the local host teardown through real os-brick with privsep really
executing (a forked privsep daemon running ``iscsiadm`` as root), and
reimage through ``copy_image_to_volume`` behind Cinder's image gates.  The
kernel iSCSI initiator cannot exist on this machine, so the local connection
os-brick tears down was never logged in: what is proven is that os-brick's
real disconnect code runs its commands through privsep.
"""

import logging
import os
import socket
import subprocess
import threading
import time
import uuid

from cinder import exception as cinder_exception
from cinder.tests.functional.api import client
import fixtures
from oslo_utils import units

from cinder_forcedetach import exception as fd_exception
from tests import fakes
from tests.functional import base


class CinderApiPathsTestCase(base.CinderTgtTestCase):

    def test_os_force_detach_with_connector(self):
        vol = self.create_volume()
        att, info = self.attach(vol['id'], 'compute1')
        session = self.login(info, 'compute1')
        self.force_detach_api(vol['id'], base.connector_for('compute1'),
                              att['id'])
        vol = self.wait_volume(vol['id'], ('available',))
        self.assertEqual([], vol['attachments'])
        self.assertIsNone(self.target_state(vol['id']))
        self.assert_cut_off(session, 0xee)

    def test_os_force_detach_without_connector(self):
        """connector None means every host (driver checklist)."""
        vol = self.create_volume()
        att, info = self.attach(vol['id'], 'compute1')
        session = self.login(info, 'compute1')
        self.force_detach_api(vol['id'])
        self.wait_volume(vol['id'], ('available',))
        self.assertIsNone(self.target_state(vol['id']))
        self.assert_cut_off(session, 0xee)

    def test_os_force_detach_backend_down_is_500_and_db_unchanged(self):
        vol = self.create_volume()
        att, info = self.attach(vol['id'], 'compute1')
        self.tgtd.kill()
        self.assertRaises(client.OpenStackApiException500,
                          self.force_detach_api, vol['id'])
        vol = self.api.get_volume(vol['id'])
        self.assertEqual('in-use', vol['status'])
        self.assertEqual([att['id']],
                         [a['attachment_id'] for a in vol['attachments']])

    def test_attachment_create_complete_delete(self):
        vol = self.create_volume()
        att, info = self.attach(vol['id'], 'compute1')
        state = self.target_state(vol['id'])
        self.assertEqual([base.initiator_name('compute1')], state.acls)
        self.assertEqual(1, len(state.accounts))
        self.assertEqual(info['auth_username'], state.accounts[0])
        session = self.login(info, 'compute1')

        self.api.api_delete('/attachments/%s' % att['id'])
        self.wait_volume(vol['id'], ('available',))
        self.assertIsNone(self.target_state(vol['id']))
        self.assert_cut_off(session, 0xee)

    def test_attachment_delete_keeps_shared_export(self):
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        att_a, info_a = self.attach(vol_id, 'compute1')
        att_b, info_b = self.attach(vol_id, 'compute2')
        self.assertEqual(info_a['auth_username'], info_b['auth_username'])
        a = self.login(info_a, 'compute1')
        b = self.login(info_b, 'compute2')
        self.control_write(a)

        self.api.api_delete('/attachments/%s' % att_a['id'])
        self.wait_volume(vol_id, ('in-use',))
        self.assertEqual([base.initiator_name('compute2')],
                         self.target_state(vol_id).acls)
        self.assert_cut_off(a, 0xee)
        self.assertTrue(b.write(0x22, offset=4096))

        self.api.api_delete('/attachments/%s' % att_b['id'])
        self.wait_volume(vol_id, ('available',))
        self.assertIsNone(self.target_state(vol_id))

    def test_shelve_offload_reservation_does_not_keep_the_export(self):
        """Nova's shelve-offload: reserve without a connector, then delete.

        The reservation never reached the backend, so the leaving host's
        attachment delete removes the export (Cinder had kept an empty
        target when the driver counted it as a user).  Unshelve completes
        the reservation with a host's connector: the export is made again
        and that host reads what was written before.
        """
        vol_id = self.create_volume()['id']
        server = str(uuid.uuid4())
        att = self.api.api_post('/attachments', {'attachment': {
            'volume_uuid': vol_id, 'instance_uuid': server,
            'connector': self.connector('compute1')}})['attachment']
        self.api.api_post('/attachments/%s/action' % att['id'],
                          {'os-complete': {}}, check_response_status=[204])
        info = att['connection_info']
        self.assertTrue(self.login(info, 'compute1').write(0x3c, offset=4096))
        # Cinder allows a second attachment of the same server only.
        reserved = self.api.api_post('/attachments', {'attachment': {
            'volume_uuid': vol_id, 'instance_uuid': server}})['attachment']
        # Nova deletes the old attachment with its service token.
        self.api.api_delete('/attachments/%s' % att['id'],
                            headers=base.SERVICE)
        self.wait_volume(vol_id, ('reserved',))
        self.assertIsNone(self.target_state(vol_id))

        info = self.api.api_put('/attachments/%s' % reserved['id'], {
            'attachment': {'connector': self.connector('compute2')}}
        )['attachment']['connection_info']
        self.api.api_post('/attachments/%s/action' % reserved['id'],
                          {'os-complete': {}}, check_response_status=[204])
        self.wait_volume(vol_id, ('in-use',))
        self.assertEqual([base.initiator_name('compute2')],
                         self.target_state(vol_id).acls)
        self.assertTrue(self.login(info, 'compute2').read(0x3c, offset=4096))

    def test_attach_outlives_the_export_removal_of_a_leaving_host(self):
        """Cinder's attach exports and connects in two calls.

        Host 1's attachment delete has terminated its connection (no other
        attachment then) when host 2's attach runs ``create_export``; host
        1's ``remove_export`` lands before host 2's
        ``initialize_connection``.  Both requests go through the real API
        and volume manager; hooks on the driver only hold each one at the
        point where the other must overtake it.  Host 2 gets its export
        back and writes; host 1 has no access.
        """
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        att_1, info_1 = self.attach(vol_id, 'compute1')
        session_1 = self.login(info_1, 'compute1')
        terminated, exported, removed = (threading.Event(),
                                         threading.Event(),
                                         threading.Event())
        real_terminate = self.driver.terminate_connection
        real_create = self.driver.create_export
        real_remove = self.driver.remove_export

        def terminate_connection(*args, **kwargs):
            shared = real_terminate(*args, **kwargs)
            terminated.set()
            exported.wait(30)
            return shared

        def create_export(*args, **kwargs):
            update = real_create(*args, **kwargs)
            exported.set()
            removed.wait(30)
            return update

        def remove_export(*args, **kwargs):
            real_remove(*args, **kwargs)
            removed.set()

        self.useFixture(fixtures.MockPatchObject(
            self.driver, 'terminate_connection',
            side_effect=terminate_connection))
        self.useFixture(fixtures.MockPatchObject(
            self.driver, 'create_export', side_effect=create_export))
        self.useFixture(fixtures.MockPatchObject(
            self.driver, 'remove_export', side_effect=remove_export))
        self.control_write(session_1)
        leaving = threading.Thread(target=self.api.api_delete,
                                   args=('/attachments/%s' % att_1['id'],))
        leaving.start()
        self.addCleanup(leaving.join, 60)
        self.assertTrue(terminated.wait(30))
        att_2, info_2 = self.attach(vol_id, 'compute2')
        leaving.join(60)
        self.assertTrue(removed.is_set(), 'the race was not reproduced')

        self.assertEqual([base.initiator_name('compute2')],
                         self.target_state(vol_id).acls)
        self.login(info_2, 'compute2')
        self.assert_cut_off(session_1, 0xee)
        vol = self.wait_volume(vol_id, ('in-use',))
        self.assertEqual([att_2['id']],
                         [a['attachment_id'] for a in vol['attachments']])

    def debug_records(self):
        """(logger name, message) of every record, DEBUG and up."""
        records = []
        handler = logging.Handler(level=logging.DEBUG)
        handler.emit = lambda record: records.append(
            (record.name, record.getMessage()))
        root = logging.getLogger()
        root.addHandler(handler)
        self.addCleanup(root.removeHandler, handler)
        # setLevel, not an attribute patch: it clears the loggers' cached
        # isEnabledFor answers.
        self.addCleanup(root.setLevel, root.level)
        root.setLevel(logging.DEBUG)
        return records

    def test_chap_password_never_logged(self):
        """Not by us, nor by the commands we run, nor by os-brick.

        (At DEBUG, oslo.policy itself logs whole volume objects, with
        provider_auth, on policy checks: that is upstream's, and the
        reason deployments do not run cinder-api with debug on.)
        """
        records = self.debug_records()
        vol = self.create_volume()
        att, info = self.attach(vol['id'], 'compute1')
        self.login(info, 'compute1')
        self.driver.force_detach(self.ctxt, self.db_volume(vol['id']))
        self.force_detach_api(vol['id'])
        ours = [msg for name, msg in records if name.startswith(
            ('cinder_forcedetach', 'oslo_concurrency', 'os_brick',
             'cinder.volume.manager', 'cinder.volume.flows'))]
        self.assertTrue(any('tgtadm new_account' in m for m in ours), ours)
        self.assertTrue(any('Attachments(%s)' % att['id'] in m
                            for m in ours), ours)
        self.assertEqual([], [m for m in ours if info["auth_password"] in m])

    def test_chap_password_not_in_a_failed_step_report(self):
        """A step that fails after others: taskflow reports their inputs.

        The volume and the attachments (whose reprs hold provider_auth and
        connection_info) are masked in it.
        """
        records = self.debug_records()
        vol = self.create_volume()
        _att, info = self.attach(vol['id'], 'compute1')
        self.useFixture(fixtures.MockPatchObject(
            self.driver, 'fence_clients', side_effect=RuntimeError('down')))
        self.assertRaises(fd_exception.ForceDetachFailed,
                          self.driver.force_detach, self.ctxt,
                          self.db_volume(vol['id']))
        report = [m for _n, m in records if 'predecessors' in m]
        self.assertNotEqual([], report, 'no failure report was logged')
        self.assertIn("'volume': '***'", report[0])
        self.assertIn("'detaching': '***'", report[0])
        # (oslo.policy's own DEBUG lines: see the test above.)
        self.assertEqual([], [m for n, m in records
                              if info['auth_password'] in m and
                              not n.startswith('oslo_policy')])


class LocalHostDisconnectTestCase(base.CinderTgtTestCase):
    """os-brick's real iSCSI disconnect, with privsep actually executing.

    Privsep runs os-brick's privileged functions as root in this process
    (client mode off, which needs no helper); a shim first on PATH logs
    each ``iscsiadm`` call and then runs Debian's real
    ``/usr/sbin/iscsiadm``.  The kernel initiator is absent here, so
    iscsiadm finds no session: that is the never-connected case.
    """

    def setUp(self):
        super(LocalHostDisconnectTestCase, self).setUp()
        shim_dir = self.useFixture(fixtures.TempDir()).path
        self.calls_log = os.path.join(shim_dir, 'iscsiadm.calls')
        shim = os.path.join(shim_dir, 'iscsiadm')
        with open(shim, 'w') as f:
            f.write('#!/bin/sh\necho "$@" >> %s\nexec /usr/sbin/iscsiadm '
                    '"$@"\n' % self.calls_log)
        os.chmod(shim, 0o755)
        self.useFixture(fixtures.EnvironmentVariable(
            'PATH', shim_dir + os.pathsep + os.environ['PATH']))
        # We are root: privileged functions run in this process rather than
        # through a daemon (a forked daemon would copy the running Cinder
        # services of this process).
        from os_brick import privileged
        privileged.default.set_client_mode(False)
        self.addCleanup(privileged.default.set_client_mode, True)

    def iscsiadm_calls(self):
        if not os.path.exists(self.calls_log):
            return []
        with open(self.calls_log) as f:
            return f.read().splitlines()

    def test_force_detach_disconnects_this_host_with_os_brick(self):
        here = socket.gethostname()
        vol = self.create_volume()
        att, info = self.attach(vol['id'], here)
        session = self.login(info, here)
        self.driver.force_detach(self.ctxt, self.db_volume(vol['id']))
        calls = self.iscsiadm_calls()
        self.assertTrue(any(c.startswith('-m session') for c in calls),
                        calls)
        self.assertIsNone(self.target_state(vol['id']))
        self.assert_cut_off(session, 0xee)

    def test_other_host_is_not_disconnected_locally(self):
        vol = self.create_volume()
        att, info = self.attach(vol['id'], 'compute1')
        self.driver.force_detach(self.ctxt, self.db_volume(vol['id']))
        self.assertEqual([], self.iscsiadm_calls())
        self.assertIsNone(self.target_state(vol['id']))


class ReimageTestCase(base.CinderTgtTestCase):

    def make_image(self, fmt, size, pattern):
        """A real image made with qemu-img/qemu-io; returns its path."""
        path = os.path.join(self.volumes_dir, 'image-%s-%d' % (fmt, size))
        subprocess.run(['qemu-img', 'create', '-f', fmt, path, str(size)],
                       check=True, capture_output=True)
        subprocess.run(['qemu-io', '-f', fmt, '-c',
                        'write -P 0x%02x 0 64k' % pattern, path],
                       check=True, capture_output=True)
        return path

    def image_service(self, image_id, path, fmt, with_location=True):
        """Glance over one file (``file://`` location if *with_location*)."""
        images = fakes.FakeImageService(file_locations=with_location)
        images.add(image_id, path=path, disk_format=fmt)
        return images

    def volume_head(self, volume, length=64 * 1024):
        with open(self.driver.local_path(volume), 'rb') as f:
            return f.read(length)

    def test_qcow2_written_through_upstream_fetch(self):
        # Was: qemu-img read the file:// location itself, without a
        # temporary file, bypassing Cinder's image checks (issue 8 item 2).
        volume = self.db_volume(self.create_volume()['id'])
        images = self.image_service(
            'img', self.make_image('qcow2', 16 * units.Mi, 0xa1), 'qcow2')
        tmp = self.useFixture(fixtures.TempDir()).path
        self.flags(image_conversion_dir=tmp)
        self.driver.copy_image_to_volume(self.ctxt, volume, images, 'img')
        self.assertEqual(b'\xa1' * 65536, self.volume_head(volume))
        self.assertEqual(1, len(images.downloads))
        self.assertEqual([], os.listdir(tmp))     # temporary files removed

    def test_raw_streamed_from_download(self):
        volume = self.db_volume(self.create_volume()['id'])
        images = self.image_service(
            'img', self.make_image('raw', 8 * units.Mi, 0xb2), 'raw',
            with_location=False)
        self.driver.copy_image_to_volume(self.ctxt, volume, images, 'img')
        self.assertEqual(b'\xb2' * 65536, self.volume_head(volume))
        self.assertEqual(1, len(images.downloads))

    def test_image_larger_than_volume_is_refused_untouched(self):
        volume = self.db_volume(self.create_volume()['id'])
        with open(self.driver.local_path(volume), 'r+b') as f:
            f.write(b'\x77' * 65536)
        for fmt, location in (('qcow2', True), ('raw', False)):
            images = self.image_service(
                'big', self.make_image(fmt, 2 * units.Gi, 0xc3), fmt,
                with_location=location)
            # upstream's check_virtual_size says ImageUnacceptable
            self.assertRaises((cinder_exception.ImageTooBig,
                               cinder_exception.ImageUnacceptable),
                              self.driver.copy_image_to_volume, self.ctxt,
                              volume, images, 'big')
            self.assertEqual(b'\x77' * 65536, self.volume_head(volume))

    def test_backing_file_image_is_refused(self):
        volume = self.db_volume(self.create_volume()['id'])
        backing = self.make_image('raw', units.Mi, 0x01)
        overlay = os.path.join(self.volumes_dir, 'overlay.qcow2')
        subprocess.run(['qemu-img', 'create', '-f', 'qcow2', '-F', 'raw',
                        '-b', backing, overlay], check=True,
                       capture_output=True)
        images = self.image_service('ovl', overlay, 'qcow2')
        self.assertRaises(cinder_exception.ImageUnacceptable,
                          self.driver.copy_image_to_volume, self.ctxt,
                          volume, images, 'ovl')


class VolumeLifecycleTestCase(base.CinderTgtTestCase):
    """Create, snapshot, clone, extend, delete through the real API."""

    def volume_with_snapshot(self):
        """A volume holding 4 KiB of 0x42, and a snapshot of it."""
        vol = self.create_volume()
        path = self.driver.local_path(self.db_volume(vol['id']))
        with open(path, 'r+b') as f:
            f.write(b'\x42' * 4096)
        snap = self.wait_snapshot(self.api.post_snapshot({'snapshot': {
            'volume_id': vol['id'], 'name': 's'}})['id'])
        return vol, path, snap

    def test_revert_to_snapshot_restores_the_data(self):
        """os-revert (3.40): the driver's own revert, no host attach."""
        vol, path, snap = self.volume_with_snapshot()
        with open(path, 'r+b') as f:
            f.write(b'\x43' * 8192)
        self.revert(vol['id'], snap['id'])
        with open(path, 'rb') as f:
            self.assertEqual(b'\x42' * 4096 + bytes(4096), f.read(8192))
        self.assertEqual(units.Gi, os.path.getsize(path))

    def test_lifecycle_keeps_data(self):
        vol, path, snap = self.volume_with_snapshot()
        self.assertEqual('available', snap['status'])
        from_snap = self.create_volume(size=2, snapshot_id=snap['id'])
        clone = self.create_volume(source_volid=vol['id'])
        for created in (from_snap, clone):
            self.assertEqual('available', created['status'])
            local = self.driver.local_path(self.db_volume(created['id']))
            with open(local, 'rb') as f:
                self.assertEqual(b'\x42' * 4096, f.read(4096))
        self.assertEqual(2 * units.Gi, os.path.getsize(
            self.driver.local_path(self.db_volume(from_snap['id']))))

        self.api.api_post('/volumes/%s/action' % vol['id'],
                          {'os-extend': {'new_size': 3}})
        self.wait_volume(vol['id'], ('available',))
        self.assertEqual(3 * units.Gi, os.path.getsize(path))

        self.api.delete_snapshot(snap['id'])
        for volume_id in (from_snap['id'], clone['id']):
            self.api.delete_volume(volume_id)
        deadline = time.monotonic() + 30
        while self.api.get_volumes() and time.monotonic() < deadline:
            if len(self.api.get_volumes()) == 1:
                break
            time.sleep(0.1)
        self.assertEqual(['%s' % vol['id']],
                         [v['id'] for v in self.api.get_volumes()])
        self.assertEqual(['volume-%s' % vol['id']],
                         sorted(os.listdir(self.volumes_dir)))

    def test_attached_extend_is_seen_by_the_host(self):
        """os-extend of an in-use volume (3.42): the target is made again.

        tgtd fixes a LUN's size when the LUN is made; the session of the
        attached host logs in again and writes on, a new login sees the
        new size, and the host's CHAP account and ACL entry are kept.
        """
        vol = self.create_volume()
        att, info = self.attach(vol['id'], 'compute1')
        session = self.login(info, 'compute1')
        before = self.target_state(vol['id'])
        self.api.api_post('/volumes/%s/action' % vol['id'],
                          {'os-extend': {'new_size': 2}},
                          check_response_status=[202])
        vol = self.wait_volume(vol['id'], ('in-use', 'error_extending'))
        self.assertEqual(('in-use', 2), (vol['status'], vol['size']))
        after = self.target_state(vol['id'])
        self.assertEqual((before.acls, before.accounts),
                         (after.acls, after.accounts))
        self.assertTrue(session.write(0x3c, offset=8192, timeout=30))
        second = self.login(info, 'compute1')
        self.assertIn('2 GiB', second._command('length', 10))
        self.assertTrue(second.write(0x3d, offset=units.Gi + 4096))
        self.assertTrue(second.read(0x3c, offset=8192))

    def test_retype_to_multiattach_in_place(self):
        """os-retype, migration_policy never: the driver's retype, no move."""
        vol = self.create_volume()
        path = self.driver.local_path(self.db_volume(vol['id']))
        self.api.api_post('/volumes/%s/action' % vol['id'], {'os-retype': {
            'new_type': self.multiattach_type(),
            'migration_policy': 'never'}}, check_response_status=[202])
        for _ in range(300):
            vol = self.api.get_volume(vol['id'])
            if vol['volume_type'] == self.multiattach_type():
                break
            time.sleep(0.1)
        self.assertEqual(('available', self.multiattach_type()),
                         (vol['status'], vol['volume_type']))
        self.assertEqual(path, self.driver.local_path(self.db_volume(
            vol['id'])))
        for host in ('compute1', 'compute2'):
            self.attach(vol['id'], host)
        self.assertEqual(2, len(self.api.get_volume(vol['id'])[
            'attachments']))

    def test_stats_have_the_keys_cinder_requires(self):
        stats = self.driver.get_volume_stats(refresh=True)
        for key in ('volume_backend_name', 'vendor_name', 'driver_version',
                    'storage_protocol', 'total_capacity_gb',
                    'free_capacity_gb', 'reserved_percentage',
                    'multiattach', 'thin_provisioning_support'):
            self.assertIn(key, stats)
        self.assertEqual('iSCSI', stats['storage_protocol'])
        self.assertGreater(stats['total_capacity_gb'], 0)


class ManageExistingTestCase(base.CinderTgtTestCase):
    """Unmanage and manage (volumes, snapshots) through the real API."""

    def setUp(self):
        super(ManageExistingTestCase, self).setUp()
        self.host = self.api.get_volume(
            self.create_volume()['id'])['os-vol-host-attr:host']

    def write(self, volume_id, data):
        path = self.driver.local_path(self.db_volume(volume_id))
        with open(path, 'r+b') as f:
            f.write(data)
        return path

    def unmanage(self, kind, resource_id):
        """os-unmanage; waits until the API no longer lists it."""
        self.api.api_post('/%s/%s/action' % (kind, resource_id),
                          {'os-unmanage': {}}, check_response_status=[202])
        for _ in range(300):
            listed = self.api.api_get('/%s' % kind)[kind]
            if resource_id not in [r['id'] for r in listed]:
                return
            time.sleep(0.1)
        self.fail('%s %s still listed' % (kind, resource_id))

    def manage_volume(self, source_name):
        vol = self.api.api_post('/manageable_volumes', {'volume': {
            'host': self.host, 'ref': {'source-name': source_name}}})[
            'volume']
        return self.wait_volume(vol['id'], ('available', 'error'))

    def manage_snapshot(self, volume_id, source_name):
        return self.wait_snapshot(self.api.api_post(
            '/manageable_snapshots', {'snapshot': {
                'volume_id': volume_id,
                'ref': {'source-name': source_name}}})['snapshot']['id'])

    def test_unmanage_then_manage_volume_keeps_its_data(self):
        vol = self.create_volume()
        self.write(vol['id'], b'\x42' * 8192)
        old_name = 'volume-%s' % vol['id']
        self.unmanage('volumes', vol['id'])
        self.assertIn(old_name, os.listdir(self.volumes_dir))

        managed = self.manage_volume(old_name)
        self.assertEqual('available', managed['status'])
        self.assertEqual(1, managed['size'])
        self.assertNotIn(old_name, os.listdir(self.volumes_dir))
        path = self.driver.local_path(self.db_volume(managed['id']))
        with open(path, 'rb') as f:
            self.assertEqual(b'\x42' * 4096, f.read(4096))
        # The managed volume serves a host like any other (login writes
        # its own pattern over the first 4 KiB).
        att, info = self.attach(managed['id'], 'compute1')
        session = self.login(info, 'compute1')
        self.assertTrue(session.read(0x42, offset=4096), session.output)

    def test_manage_grows_a_file_to_whole_gib(self):
        with open(os.path.join(self.volumes_dir, 'imported'), 'wb') as f:
            f.write(b'\x07' * 4096)
        managed = self.manage_volume('imported')
        self.assertEqual('available', managed['status'])
        self.assertEqual(1, managed['size'])
        self.assertEqual(units.Gi, os.path.getsize(
            self.driver.local_path(self.db_volume(managed['id']))))

    def test_manage_refuses_what_it_must_not_take(self):
        """Hostile, missing or managed refs: error, files kept."""
        live = self.create_volume()
        self.write(live['id'], b'\x42' * 4096)
        snap = self.wait_snapshot(self.api.post_snapshot(
            {'snapshot': {'volume_id': live['id']}})['id'])
        outside = self.useFixture(fixtures.TempDir()).path
        secret = os.path.join(outside, 'secret')
        with open(secret, 'wb') as f:
            f.write(b'\x99' * 4096)
        os.symlink(secret, os.path.join(self.volumes_dir, 'link'))
        before = sorted(os.listdir(self.volumes_dir))
        # Cinder's API itself refuses the name of a volume it manages.
        self.assertRaises(client.OpenStackApiException400,
                          self.manage_volume, 'volume-%s' % live['id'])
        for ref in ('../secret', '.hidden', 'missing', 'link', 'x;rm',
                    'x.part', 'snapshot-%s' % snap['id']):
            managed = self.manage_volume(ref)
            self.assertEqual('error', managed['status'], ref)
            self.assertEqual('error_managing',
                             self.db_volume(managed['id']).status)
        self.assertEqual(before, sorted(os.listdir(self.volumes_dir)))
        with open(self.driver.local_path(self.db_volume(live['id'])),
                  'rb') as f:
            self.assertEqual(b'\x42' * 4096, f.read(4096))
        with open(secret, 'rb') as f:
            self.assertEqual(b'\x99' * 4096, f.read())

    def test_manage_the_same_file_twice(self):
        """The second manage fails clearly; the first volume is intact."""
        vol = self.create_volume()
        self.write(vol['id'], b'\x42' * 4096)
        self.unmanage('volumes', vol['id'])
        first = self.manage_volume('volume-%s' % vol['id'])
        second = self.manage_volume('volume-%s' % vol['id'])
        self.assertEqual(('available', 'error'),
                         (first['status'], second['status']))
        with open(self.driver.local_path(self.db_volume(first['id'])),
                  'rb') as f:
            self.assertEqual(b'\x42' * 4096, f.read(4096))

    def test_unmanage_then_manage_snapshot_reverts(self):
        vol = self.create_volume()
        path = self.write(vol['id'], b'\x42' * 4096)
        snap = self.wait_snapshot(self.api.post_snapshot(
            {'snapshot': {'volume_id': vol['id']}})['id'])
        self.unmanage('snapshots', snap['id'])
        self.assertIn('snapshot-%s' % snap['id'],
                      os.listdir(self.volumes_dir))

        managed = self.manage_snapshot(vol['id'], 'snapshot-%s' % snap['id'])
        self.assertEqual('available', managed['status'])
        self.write(vol['id'], b'\x43' * 8192)
        self.revert(vol['id'], managed['id'])
        with open(path, 'rb') as f:
            self.assertEqual(b'\x42' * 4096 + bytes(4096), f.read(8192))

    def test_manage_snapshot_refuses_a_live_volume_file(self):
        """A volume's file taken as a snapshot would be deleted with it."""
        vol = self.create_volume()
        other = self.create_volume()
        managed = self.manage_snapshot(vol['id'], 'volume-%s' % other['id'])
        self.assertEqual('error', managed['status'])
        self.assertIn('volume-%s' % other['id'],
                      os.listdir(self.volumes_dir))

    def test_manageable_lists(self):
        live = self.create_volume()
        with open(os.path.join(self.volumes_dir, 'imported'), 'wb') as f:
            f.write(b'\x07' * 4096)
        listed = {v['reference']['source-name']: v for v in self.api.api_get(
            '/manageable_volumes/detail?host=%s' % self.host)[
            'manageable-volumes']}
        self.assertEqual((True, 1), (listed['imported']['safe_to_manage'],
                                     listed['imported']['size']))
        mine = listed['volume-%s' % live['id']]
        self.assertEqual((False, 'already managed', live['id']),
                         (mine['safe_to_manage'], mine['reason_not_safe'],
                          mine['cinder_id']))
