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


"""The SQLite reference array on its own: idempotence and failure modes."""

import os
import sqlite3

from cinder.tests.unit import test
import ddt
import fixtures

from cinder_forcedetach.arrays import base as array_base
from cinder_forcedetach.arrays import sqlite as sqlite_array
from tests import fakes

TARGETS = fakes.FC_TARGETS
PORTS = fakes.FC_PORTS
HOSTS = fakes.FC_HOSTS
TIMEOUT = fakes.FC_ARRAY_TIMEOUT


wwpns = fakes.fc_wwpns


@ddt.ddt
class SqliteArrayTestCase(test.TestCase):
    """The reference array on its own: idempotence and failure modes."""

    def setUp(self):
        super(SqliteArrayTestCase, self).setUp()
        path = os.path.join(self.useFixture(fixtures.TempDir()).path,
                            'sub', 'array.db')
        self.array = sqlite_array.SqliteArray(path, timeout=TIMEOUT,
                                              target_ports=TARGETS)
        self.array.setup()
        self.array.setup()  # idempotent

    def test_ports(self):
        self.assertEqual(PORTS, self.array.target_ports())

    def test_hosts(self):
        self.assertEqual('h', self.array.ensure_host('h', wwpns('B')[:1]))
        # A connector with one more HBA extends the same host.
        self.assertEqual('h', self.array.ensure_host('other', wwpns('B')))
        self.assertEqual(wwpns('B'), self.array.host_wwpns('h'))
        # Same name, other WWPNs: another host.
        self.assertEqual('h-1', self.array.ensure_host('h', wwpns('A')))
        self.assertRaises(array_base.HostConflict, self.array.find_host,
                          wwpns('A') + wwpns('B'))
        self.assertIsNone(self.array.find_host(wwpns('C')))
        self.assertEqual([], self.array.host_wwpns('nope'))

    def test_masking_in_one_read(self):
        self.assertEqual({}, self.array.masking())
        self.array.ensure_host('a', wwpns('A'))
        self.array.ensure_host('b', wwpns('B'))
        self.array.map_volume('v1', 'a')
        self.array.map_volume('v1', 'b')
        self.array.map_volume('v2', 'b')
        self.assertEqual({'v1': {'a': wwpns('A'), 'b': wwpns('B')},
                          'v2': {'b': wwpns('B')}}, self.array.masking())

    def test_map_unmap_idempotent(self):
        self.array.ensure_host('a', wwpns('A'))
        self.array.ensure_host('b', wwpns('B'))
        self.assertEqual(1, self.array.map_volume('v1', 'a'))
        self.assertEqual(1, self.array.map_volume('v1', 'a'))
        self.assertEqual(2, self.array.map_volume('v2', 'a'))
        self.assertEqual(1, self.array.map_volume('v1', 'b'))
        self.assertEqual(['b'], self.array.unmap_volume('v1', 'a'))
        self.assertEqual(['b'], self.array.unmap_volume('v1', 'a'))
        self.assertEqual(['b'], self.array.unmap_volume('v1', 'nope'))
        self.assertEqual([], self.array.unmap_volume('v1'))
        self.assertEqual([], self.array.unmap_volume('v1'))
        self.assertEqual({'v2': 2}, self.array.luns_of_host('a'))
        # The freed LUN id is reused.
        self.assertEqual(1, self.array.map_volume('v3', 'a'))
        self.assertRaises(array_base.ArrayError, self.array.map_volume,
                          'v1', 'nope')

    def test_delete_host(self):
        self.array.ensure_host('a', wwpns('A'))
        self.array.map_volume('v1', 'a')
        self.assertRaises(array_base.HostBusy, self.array.delete_host, 'a')
        self.array.unmap_volume('v1')
        self.array.delete_host('a')
        self.array.delete_host('a')
        self.assertIsNone(self.array.find_host(wwpns('A')))

    def test_busy_host(self):
        self.array.ensure_host('a', wwpns('A'))
        self.array.map_volume('v1', 'a')
        self.array.set_host_busy('a', 'held by session 7')
        before = self.array.dump()
        for call in (lambda: self.array.unmap_volume('v1', 'a'),
                     lambda: self.array.unmap_volume('v1'),
                     lambda: self.array.map_volume('v2', 'a')):
            err = self.assertRaises(array_base.HostBusy, call)
            self.assertIn('held by session 7', str(err))
        self.assertEqual(before, self.array.dump())
        # Already unmapped is a success even on a busy host.
        self.assertEqual([], self.array.unmap_volume('v9', 'a'))

    @ddt.data('target_ports', 'dump')
    def test_timeout_on_reads(self, method):
        with fakes.array_locked(self.array.path):
            self.assertRaises(array_base.ArrayTimeout,
                              getattr(self.array, method))

    def test_timeout_on_writes_changes_nothing(self):
        self.array.ensure_host('a', wwpns('A'))
        self.array.map_volume('v1', 'a')
        before = self.array.dump()
        conn = sqlite3.connect(self.array.path, isolation_level=None)
        conn.execute('BEGIN IMMEDIATE')  # a writer, readers still allowed
        try:
            self.assertRaises(array_base.ArrayTimeout,
                              self.array.unmap_volume, 'v1')
            self.assertEqual(before, self.array.dump())
        finally:
            conn.execute('ROLLBACK')
            conn.close()
