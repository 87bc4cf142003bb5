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

"""The file-backed drivers' migration between stores of one machine.

Two real stores (directories) and Cinder's test database; the success path
through Cinder's scheduler and two volume services is tempest's
``VolumeRetypeWithMigrationTest`` on the box (``tools/run_tempest.py``).
"""

import os
import socket

from cinder import context
from cinder.tests.unit import fake_constants as fake
from cinder.tests.unit import test
from cinder.tests.unit import utils as test_utils
from cinder.volume import configuration
from cinder.volume import driver as volume_driver
import fixtures

from cinder_forcedetach.drivers import common


class MigrateVolumeTestCase(test.TestCase):

    def setUp(self):
        super(MigrateVolumeTestCase, self).setUp()
        self.ctxt = context.get_admin_context()
        tmp = self.useFixture(fixtures.TempDir()).path
        self.source, self.dest = [self.driver(os.path.join(tmp, name), name)
                                  for name in ('file_a', 'file_b')]
        self.vol = test_utils.create_volume(self.ctxt, size=1,
                                            status='available')
        self.source.create_volume(self.vol)
        with open(self.source.local_path(self.vol), 'r+b') as f:
            f.write(b'\x42' * 4096)

    def driver(self, directory, group):
        conf = configuration.Configuration(volume_driver.volume_opts,
                                           config_group=group)
        conf.append_config_values(common.volume_file_opts)
        self.override_config('forcedetach_volumes_dir', directory, group)
        drv = common.FileVolumeDriver(configuration=conf)
        drv.do_setup(self.ctxt)
        return drv

    def host(self, location_info):
        return {'host': 'box@file_b#file_b',
                'capabilities': {'location_info': location_info}}

    def test_moves_the_file_to_the_other_store(self):
        self.vol.status = 'retyping'
        moved = self.source.migrate_volume(
            self.ctxt, self.vol, self.host(self.dest.location_info()))
        self.assertEqual((True, None), moved)
        self.assertFalse(os.path.exists(self.source.local_path(self.vol)))
        with open(self.dest.local_path(self.vol), 'rb') as f:
            self.assertEqual(b'\x42' * 4096, f.read(4096))

    def test_anything_else_is_left_to_cinder(self):
        """(False, None): Cinder's generic migration; nothing moved."""
        kind, machine, directory = self.dest.location_info().split(':', 2)
        for info in (None, '', 'LVMVolumeDriver:%s:vg:default:0' % machine,
                     '%s:other-machine:%s' % (kind, directory),
                     '%s:%s:relative/dir' % (kind, machine),
                     '%s:%s:%s/missing' % (kind, machine, directory),
                     self.source.location_info()):
            self.assertEqual((False, None), self.source.migrate_volume(
                self.ctxt, self.vol, self.host(info)), info)
        test_utils.attach_volume(self.ctxt, self.vol.id, fake.INSTANCE_ID,
                                 'compute1', '/dev/vdb')
        self.vol.refresh()
        self.assertEqual((False, None), self.source.migrate_volume(
            self.ctxt, self.vol, self.host(self.dest.location_info())))
        self.assertTrue(os.path.exists(self.source.local_path(self.vol)))
        self.assertEqual([], os.listdir(self.dest.store.directory))

    def test_a_file_at_the_destination_is_never_replaced(self):
        with open(self.dest.local_path(self.vol), 'wb') as f:
            f.write(b'\x07')
        self.assertRaises(FileExistsError, self.source.migrate_volume,
                          self.ctxt, self.vol,
                          self.host(self.dest.location_info()))
        self.assertTrue(os.path.exists(self.source.local_path(self.vol)))
        with open(self.dest.local_path(self.vol), 'rb') as f:
            self.assertEqual(b'\x07', f.read())

    def test_location_info_names_this_machine_and_store(self):
        self.assertEqual(
            'FileVolumeDriver:%s:%s' % (socket.gethostname(),
                                        self.source.store.directory),
            self.source.location_info())
        self.assertEqual(self.source.location_info(),
                         self.source.get_volume_stats(True)['location_info'])
