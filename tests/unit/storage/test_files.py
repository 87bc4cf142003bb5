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

"""The sparse-file store: adopting a file for manage-existing, listing."""

import os

import fixtures
from oslo_utils import units
import testtools

from cinder_forcedetach.storage import files


class FileStoreTestCase(testtools.TestCase):

    def setUp(self):
        super(FileStoreTestCase, self).setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.store = files.FileStore(self.dir)

    def make(self, name, data):
        with open(os.path.join(self.dir, name), 'wb') as f:
            f.write(data)

    def test_adopt_renames_and_grows_to_a_whole_gib(self):
        self.make('imported', b'\x07' * 4096)
        self.assertEqual(1, self.store.adopt('imported', 'volume-1'))
        self.assertEqual(['volume-1'], self.store.names())
        self.assertEqual(units.Gi, os.path.getsize(self.store.path(
            'volume-1')))
        with open(self.store.path('volume-1'), 'rb') as f:
            self.assertEqual(b'\x07' * 4096, f.read(4096))

    def test_adopt_never_replaces_a_file(self):
        self.make('imported', b'\x07')
        self.make('volume-1', b'\x42')
        self.assertRaises(FileExistsError, self.store.adopt, 'imported',
                          'volume-1')
        for name, data in (('imported', b'\x07'), ('volume-1', b'\x42')):
            with open(self.store.path(name), 'rb') as f:
                self.assertEqual(data, f.read())

    def test_adopt_in_place_only_grows(self):
        self.make('volume-1', b'\x07' * (units.Gi + 1))
        self.assertEqual(2, self.store.adopt('volume-1', 'volume-1'))
        self.assertEqual(2 * units.Gi, os.path.getsize(
            self.store.path('volume-1')))

    def test_names_leave_out_copies_in_flight_and_links(self):
        self.make('volume-1', b'')
        self.make('volume-2.part', b'')
        os.symlink('/etc/hostname', os.path.join(self.dir, 'link'))
        os.mkdir(os.path.join(self.dir, 'subdir'))
        self.assertEqual(['volume-1'], self.store.names())
